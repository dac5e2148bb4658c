/**
 * `GET /metrics` for Prometheus: allowed with `Authorization: Bearer <CLAIMWATCH_METRICS_TOKEN>`
 * (a token that reads metrics and nothing else) or as any viewer (session cookie or viewer/
 * operator token). Values are read from Redis per scrape (lib/metrics/collect).
 */
import crypto from "node:crypto";
import { authenticateHeaders } from "../auth/guard";
import { collectMetrics } from "../metrics/collect";
import { getWebContext } from "../web/context";
import { errorResponse } from "./errors";

const digest = (text: string) => crypto.createHash("sha256").update(text).digest();

export function isMetricsToken(authorization: string | null, token: string | undefined): boolean {
  if (!token || !authorization) return false;
  const match = /^Bearer\s+(\S+)$/i.exec(authorization);
  return Boolean(match) && crypto.timingSafeEqual(digest(match![1]!), digest(token));
}

export async function metricsResponse(request: Request): Promise<Response> {
  try {
    const context = getWebContext();
    const allowed =
      isMetricsToken(request.headers.get("authorization"), context.config.metricsToken) ||
      (await authenticateHeaders(context.config, request.headers, context.sessions)) !== null;
    if (!allowed) {
      return Response.json(
        {
          error: {
            code: "unauthenticated",
            message: "send Authorization: Bearer <CLAIMWATCH_METRICS_TOKEN> or log in",
          },
        },
        {
          status: 401,
          headers: { "www-authenticate": 'Bearer realm="claimwatch metrics"', "cache-control": "no-store" },
        },
      );
    }
    const { connections, definitions, queue } = context;
    const { contentType, body } = await collectMetrics({
      main: connections.main,
      claims: connections.claims,
      keys: connections.keys,
      definitions,
      queue,
    });
    return new Response(body, { headers: { "content-type": contentType, "cache-control": "no-store" } });
  } catch (error) {
    return errorResponse(error);
  }
}
