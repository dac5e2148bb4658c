/**
 * `GET /api/health` as an answer: 200 when both Redis servers answer, 503 otherwise. The body is
 * the report (load balancers read the status, the dashboard's banner the report); a 503 carries
 * the API's error shape beside it, as every refusal does. Anonymous callers get the report
 * without details (lib/health publicHealth), and so does the message.
 */
import { publicHealth, type HealthReport, type PublicHealthReport } from "../health/health";
import type { Reply } from "./errors";

export function healthReply(report: HealthReport, identified: boolean): Reply {
  const shown = identified ? report : publicHealth(report);
  if (report.ok) return { status: 200, body: shown };
  return { status: 503, body: { error: { code: "unavailable", message: unreachable(shown) }, ...shown } };
}

/** `Redis is unreachable: <why>; Claims Redis is unreachable` (the why only where the report has it). */
function unreachable(report: HealthReport | PublicHealthReport): string {
  const down = (
    [
      ["Redis", report.redis],
      ["Claims Redis", report.claimsRedis],
    ] as [string, { ok: true } | { ok: false; error: string }][]
  ).flatMap(([label, safety]) =>
    safety.ok
      ? []
      : [safety.error === "unreachable" ? `${label} is unreachable` : `${label} is unreachable: ${safety.error}`],
  );
  return down.join("; ") || "a Redis server does not answer";
}
