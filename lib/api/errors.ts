/**
 * API errors: `{"error":{"code","message"}}` with an HTTP status. Expected refusals (bad input,
 * unknown names) are ApiErrors; anything else becomes a 500 without internals in the message.
 */
import type { z, ZodError } from "zod";
import "../zod-messages";

import { ApiError } from "../http/errors";
import { isRedisUnavailable, unavailableMessage } from "../redis/unavailable";
import { meantKey } from "../zod-keys";

export { ApiError, badRequest, notFound } from "../http/errors";

/**
 * One line naming the field: `limit: must be at most 100`. With the `schema` and the `input` it
 * refused, an unknown field names the one it was surely meant as (`'verison' (did you mean
 * 'version'?)`), as `claimwatch.yaml`'s problems do.
 */
export function describeZodError(error: ZodError, refused?: { schema: z.core.$ZodType; input: unknown }): string {
  const issue = error.issues[0];
  if (!issue) return "invalid input";
  const where = issue.path.length ? issue.path.map(String).join(".") : "body";
  if (issue.code === "unrecognized_keys") {
    const given = issue.path.reduce<unknown>(
      (value, key) => (value && typeof value === "object" ? (value as Record<PropertyKey, unknown>)[key] : undefined),
      refused?.input,
    );
    const named = issue.keys.map((key) => {
      const wanted = refused ? meantKey(refused.schema, issue.path, key, given) : undefined;
      return wanted ? `'${key}' (did you mean '${wanted}'?)` : `'${key}'`;
    });
    return `${where === "body" ? "" : `${where}: `}unknown field ${named.join(", ")}`;
  }
  return `${where}: ${issue.message}`;
}

/** A handler's answer decided in lib/api: the route sends `body` with `status`. */
export interface Reply {
  status: number;
  body: unknown;
}

/**
 * An expected refusal answered as data (409): the error shape, with the outcome's own fields
 * beside it (`status`, `auditId`, `currentHolder` …), which the dashboard and scripts read.
 * The code is the outcome (`not-owner`, `not-retryable`, …); the message says it in a sentence.
 */
export function refusal<Outcome extends { status: string }>(outcome: Outcome, message: string): Reply {
  return { status: 409, body: { error: { code: outcome.status, message }, ...outcome } };
}

/**
 * `work` against one Redis: that server away (or refusing for now) is a 503 naming it — "the
 * claims Redis is unreachable" while the main one answers (helper-151: every 503 said "Redis").
 */
export async function fromRedis<T>(which: "the claims Redis" | "the main Redis", work: Promise<T>): Promise<T> {
  try {
    return await work;
  } catch (error) {
    if (error instanceof ApiError || !isRedisUnavailable(error)) throw error;
    const message = unavailableMessage(error).replace(/^Redis/, which.replace(/^t/, "T"));
    throw new ApiError(503, "unavailable", message);
  }
}

export function errorResponse(error: unknown): Response {
  const { status, code, message } = publicErrorOf(error);
  return Response.json({ error: { code, message } }, { status });
}

/**
 * What an error is answered with: an ApiError as it says; Redis away as a 503; anything else a 500
 * without internals in its message (logged here, with its stack).
 */
export function publicErrorOf(error: unknown): { status: number; code: string; message: string } {
  if (error instanceof ApiError) return { status: error.status, code: error.code, message: error.message };
  // Redis away, or refusing writes for now (lib/redis/unavailable): the caller may send it again.
  if (isRedisUnavailable(error)) {
    return { status: 503, code: "unavailable", message: unavailableMessage(error) };
  }
  console.error("[claimwatch-web] unexpected error:", error);
  return { status: 500, code: "internal", message: "internal error; see the server log" };
}
