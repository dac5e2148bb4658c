/** `claimwatch status`: the health report of GET /api/health (as a logged-in operator sees it). */
import { healthReportOf } from "../../lib/web/health-report";
import { rebuildLabel, time } from "../../lib/cli/format";
import { tenantsOf, type Definitions } from "../../lib/rebuilds/definitions";
import { schedulerIdOf } from "../../lib/rebuilds/queue";
import { readSchedulePauses } from "../../lib/rebuilds/schedules";
import type { RedisSafety } from "../../lib/health/redis-safety";
import { EXIT } from "../outcome";
import { describeSource, loadSetup, openCliContext, type CliContext } from "../session";
import type { CommandSpec } from "./spec";

const safety = (label: string, s: RedisSafety) =>
  s.ok
    ? `${label}: ok (Redis ${s.version}, eviction ${s.evictionPolicy}, persistence ${JSON.stringify(s.persistence)})`
    : `${label}: UNREACHABLE (${s.error})`;

export interface PausedSchedule {
  rebuild: string;
  tenant: string | null;
  actor: string;
  reason: string;
  at: number;
}

/** The schedules an operator paused (they enqueue nothing until resumed), in definitions order. */
async function pausedSchedules(context: CliContext, definitions: Definitions): Promise<PausedSchedule[]> {
  const pauses = await readSchedulePauses(context.connections.main, context.connections.keys);
  const paused: PausedSchedule[] = [];
  for (const rebuild of definitions.rebuilds.values()) {
    if (!rebuild.schedule) continue;
    for (const tenant of tenantsOf(rebuild)) {
      const pause = pauses.get(schedulerIdOf(rebuild.name, tenant));
      if (pause) paused.push({ rebuild: rebuild.name, tenant: tenant ?? null, ...pause });
    }
  }
  return paused;
}

export const status: CommandSpec = {
  usage: "status",
  summary: "health: both Redis servers, workers, problems (exit 3 when Redis does not answer)",
  async run() {
    const setup = loadSetup();
    const context = openCliContext(setup);
    try {
      const report = await healthReportOf(context);
      // Shown here too, so a quiet schedule at 02:00 is not a mystery (README, "Pause / resume").
      const paused = report.redis.ok ? await pausedSchedules(context, setup.definitions).catch(() => null) : null;
      const human = [
        `claimwatch is ${report.ok ? "up" : "DOWN"}: Redis ${describeSource(context.connections.urls)}`,
        safety("Redis", report.redis),
        safety("Claims Redis", report.claimsRedis),
        // What a crash of the claims Redis may lose, as the dashboard's banner always says it.
        ...(report.claimsRedis.ok
          ? [
              `Claims Redis durability: ${report.claimsRedis.durability.level}: ${report.claimsRedis.durability.detail}` +
                (report.claimsRedis.durability.level === "durable"
                  ? ""
                  : " (published fences are also kept beside each output, so a lost write cannot reissue a fence or roll back current)"),
            ]
          : []),
        `Workers: ${report.workers ?? "unknown"}`,
        ...(report.alertsFiring ? [`Alerts firing: ${report.alertsFiring}`] : []),
        ...(paused?.length
          ? [
              "Paused schedules (nothing enqueued until resumed):",
              ...paused.map(
                (p) => `  - ${rebuildLabel(p.rebuild, p.tenant)}: by ${p.actor} at ${time(p.at)}: ${p.reason}`,
              ),
            ]
          : []),
        ...(report.problems.length ? ["Problems:", ...report.problems.map((p) => `  - ${p}`)] : ["No problems."]),
      ];
      return {
        exitCode: report.ok ? EXIT.ok : EXIT.redis,
        json: { ...report, pausedSchedules: paused },
        human,
      };
    } finally {
      await context.close();
    }
  },
};
