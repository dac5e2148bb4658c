/**
 * Operational problems for the banner, beyond Redis itself: a claim stale for over 5 minutes,
 * and a scheduled tick that produced no run (the missed 02:00). Bounded work: one claims page
 * and one pipeline over the scheduled rebuilds.
 */
import { formatAbsolute, formatDurationMs } from "../ui/format";
import type { Redis } from "ioredis";
import { listClaims } from "../claims";
import type { ScriptingPipelineClient } from "../redis/scripts";
import type { RedisKeys } from "../redis/keys";
import type { Definitions } from "../rebuilds/definitions";
import { lastTickBefore } from "../rebuilds/schedule-times";
import { definitionSchedules, pausesSchedule, type TickingSchedule } from "../rebuilds/schedules";
import { listLiveWorkers, liveWorkerIdSet } from "../workers/heartbeat";
import { describeStale, staleSince } from "../claims/stale";
import { alertsSchema } from "../alerts/config";

export const STALE_ALERT_MS = 5 * 60_000;
/** The `scheduleMissed` rule's default grace: a tick counts as missed once this long has passed without a run for it. */
export const MISSED_TICK_GRACE_MS = ((rule) => (rule ? rule.grace : 600_000))(
  alertsSchema.parse({}).rules.scheduleMissed,
);

/**
 * The `scheduleMissed` rule's `grace` (its default without an `alerts:` section, or with the rule
 * off): the banner calls a tick missed when the alert does (black-box helper-120).
 */
export function missedTickGraceOf(definitions: Pick<Definitions, "alerts">): number {
  const rule = definitions.alerts?.rules.scheduleMissed;
  return rule ? rule.grace : MISSED_TICK_GRACE_MS;
}
/** Claims examined for the banner; the Claims page shows all of them. */
const CLAIMS_CHECKED = 500;

export async function staleClaimProblems(
  main: Redis,
  claims: ScriptingPipelineClient & Pick<Redis, "zrangebylex">,
  keys: RedisKeys,
): Promise<string[]> {
  const liveWorkerIds = await liveWorkerIdSet(main, keys);
  const page = await listClaims(claims, keys, { limit: CLAIMS_CHECKED, liveWorkerIds });
  const problems: string[] = [];
  for (const claim of page.claims) {
    if (claim.revoked) continue; // already force-released: the Claims page says it is releasing
    const since = staleSince(claim);
    if (since === null || page.serverTime - since < STALE_ALERT_MS) continue;
    const label = `${claim.holder.rebuild ?? claim.name}${claim.holder.tenant ? `/${claim.holder.tenant}` : ""}`;
    const minutes = Math.floor((page.serverTime - since) / 60_000);
    problems.push(
      `Claim ${label} has been stale for ${minutes} min (${describeStale(claim.stale)}): consider a force release`,
    );
  }
  return problems;
}

/**
 * Schedules whose last tick due `graceMs` ago produced no run: the `scheduleMissed` rule's
 * `grace` (missedTickGraceOf), so the banner and the alert call the same tick missed.
 */
export async function missedTickProblems(
  main: Pick<Redis, "pipeline">,
  keys: RedisKeys,
  definitions: Definitions,
  options: {
    now?: number;
    graceMs?: number;
    /** The schedules that tick (tickingSchedules); omitted: the definitions' own. */
    schedules?: readonly TickingSchedule[];
  } = {},
): Promise<string[]> {
  const now = options.now ?? Date.now();
  const graceMs = options.graceMs ?? missedTickGraceOf(definitions);
  const schedules = options.schedules ?? definitionSchedules(definitions);
  const lastTicks = new Map<string, number>();
  const checks = schedules.map((schedule) => {
    const timing = `${schedule.cron}|${schedule.tz}`;
    let tick = lastTicks.get(timing);
    if (tick === undefined) lastTicks.set(timing, (tick = lastTickBefore(schedule, now - graceMs)));
    return {
      label: `${schedule.rebuild}${schedule.tenant ? `/${schedule.tenant}` : ""}`,
      tick,
      scheduler: keys.schedulerSince(schedule.schedulerId),
      schedulerId: schedule.schedulerId,
      ticksKey: keys.scheduleTicks(schedule.rebuild, schedule.tenant),
      runsKey: keys.runIndex({
        rebuild: schedule.rebuild,
        ...(schedule.tenant ? { tenant: schedule.tenant } : {}),
      }),
    };
  });
  if (checks.length === 0) return [];
  const pipeline = main.pipeline();
  // A paused schedule enqueues nothing by design: none of its ticks is missed (resuming moves
  // `schedulerSince` past the pause, so the ticks while paused stay unmissed afterwards too).
  // A run that started at or after the tick answers it, as the scheduleMissed alert counts: a
  // worker back after an outage runs the tick it finds waiting, and that one run answers the ticks
  // missed meanwhile (black-box helper-175: the banner named them one by one for a minute).
  for (const check of checks) {
    pipeline
      .get(check.scheduler)
      .zcount(check.ticksKey, check.tick, check.tick)
      .hget(keys.pausedSchedules, check.schedulerId)
      .zcount(check.runsKey, check.tick, "+inf");
  }
  const replies = (await pipeline.exec()) ?? [];
  const problems: string[] = [];
  checks.forEach((check, i) => {
    const since = Number(replies[i * 4]?.[1] ?? NaN);
    const ran = Number(replies[i * 4 + 1]?.[1] ?? 0);
    const paused = pausesSchedule(replies[i * 4 + 2]?.[1]);
    const startedSince = Number(replies[i * 4 + 3]?.[1] ?? 0);
    if (!paused && Number.isFinite(since) && since <= check.tick && ran === 0 && startedSince === 0) {
      problems.push(
        `Scheduled run of ${check.label} at ${formatAbsolute(check.tick, "utc")} did not start (missed tick)`,
      );
    }
  });
  return problems;
}

/**
 * Live workers that can only contain steps — or their steps with limits — by process group (a
 * setsid daemon escapes it), root workers whose steps could write into published builds, and
 * live workers whose upkeep after a beat has run for
 * `CLAIMWATCH_UPKEEP_SLOW_MS` (30 s) or more (held up: it closes no dead worker's runs, repairs no `current`).
 */
export async function liveWorkerProblems(
  main: Pick<Redis, "zrangebyscore" | "pipeline" | "multi" | "zcount">,
  keys: RedisKeys,
): Promise<string[]> {
  const live = await listLiveWorkers(main, keys);
  const weak = live.filter((w) => w.containment === "process-group");
  const weakLimited = live.filter(
    (w) => w.containment !== "process-group" && w.limitedStepsContainment === "process-group",
  );
  const problems: string[] = [];
  if (weak.length > 0)
    problems.push(
      `Worker${weak.length === 1 ? "" : "s"} ${weak.map((w) => w.id).join(", ")} can contain steps only by process group: a step's setsid daemon can outlive it (see README, step containment)`,
    );
  if (weakLimited.length > 0)
    problems.push(
      `Worker${weakLimited.length === 1 ? "" : "s"} ${weakLimited.map((w) => w.id).join(", ")} can contain steps with memory/pids limits only by process group (no PID namespace there): such a step's setsid daemon can outlive it (see README, step containment)`,
    );
  const exposed = live.filter((w) => w.publishedBuilds === "writable");
  if (exposed.length > 0)
    problems.push(
      `Worker${exposed.length === 1 ? "" : "s"} ${exposed.map((w) => w.id).join(", ")} run${exposed.length === 1 ? "s" : ""} steps as root without a read-only view of published builds (no mount namespace there): a step could change a published build; the build check and claimwatch verify would find it (see README, published builds never change)`,
    );
  // Workers of a version before the rebuilt marks moved to one lane per output (its heartbeat says
  // nothing of what it declares) beside workers of this one: each version reads its own lanes, so
  // a request can be skipped as already rebuilt while the output serves a version the other one
  // published (review helper-183). RELIABILITY.md, "Upgrading".
  const earlier = live.filter((w) => !w.declares);
  if (earlier.length > 0 && earlier.length < live.length)
    problems.push(
      `Worker${earlier.length === 1 ? "" : "s"} ${earlier.map((w) => w.id).join(", ")} run${earlier.length === 1 ? "s" : ""} an earlier claimwatch beside workers of this one: stop ${earlier.length === 1 ? "it" : "them"} (the two versions keep their rebuilt marks apart, so either may skip a request as already rebuilt while the output serves a version the other published; see RELIABILITY.md, "Upgrading")`,
    );
  for (const worker of live) {
    if (worker.upkeepRunningMs === null) continue;
    problems.push(
      `Worker ${worker.id}: its upkeep after a heartbeat has run for ${formatDurationMs(worker.upkeepRunningMs)} (a hung disk or an unanswered Redis command?): until it ends, this worker closes no dead worker's runs, repairs no current link, trims no records and prunes no builds`,
    );
  }
  return problems;
}
