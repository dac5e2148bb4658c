/** `claimwatch status`: the health report of GET /api/health (as a logged-in operator sees it). */
import { healthReportOf } from "../../lib/web/health-report";
import type { RedisSafety } from "../../lib/health/redis-safety";
import { EXIT } from "../outcome";
import { describeSource, loadSetup, openCliContext } from "../session";
import type { CommandSpec } from "./spec";

const safety = (label: string, s: RedisSafety) =>
  s.ok
    ? `${label}: ok (Redis ${s.version}, eviction ${s.evictionPolicy}, persistence ${JSON.stringify(s.persistence)})`
    : `${label}: UNREACHABLE (${s.error})`;

export const status: CommandSpec = {
  usage: "status",
  summary: "health: both Redis servers, workers, problems (exit 3 when Redis does not answer)",
  async run() {
    const context = openCliContext(loadSetup());
    try {
      const report = await healthReportOf(context);
      const human = [
        `claimwatch is ${report.ok ? "up" : "DOWN"}: Redis ${describeSource(context.connections.urls)}`,
        safety("Redis", report.redis),
        safety("Claims Redis", report.claimsRedis),
        `Workers: ${report.workers ?? "unknown"}`,
        ...(report.alertsFiring ? [`Alerts firing: ${report.alertsFiring}`] : []),
        ...(report.problems.length ? ["Problems:", ...report.problems.map((p) => `  - ${p}`)] : ["No problems."]),
      ];
      return { exitCode: report.ok ? EXIT.ok : EXIT.redis, json: report, human };
    } finally {
      await context.close();
    }
  },
};
