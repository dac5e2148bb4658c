/**
 * What the rules look at, read from Redis in a few pipelines: claims (census), workers, running
 * and finished runs, scheduled ticks, Redis safety, takeover events and the stored pending times.
 * Times are Redis `TIME` (main server; claim staleness on the claims server's clock), never the
 * evaluating host's clock.
 *
 * `recordExpectedTicks` writes each scheduled tick that came due (only the evaluating process
 * calls it): a tick is then "expected", and `scheduleMissed` compares it with the runs.
 */
import type { Redis } from "ioredis";
import { readClaimCensus, type ClaimCensus } from "../claims/census";
import { inspectRedis, type RedisSafety } from "../health/redis-safety";
import { tenantsOf, type Definitions } from "../rebuilds/definitions";
import { schedulerIdOf } from "../rebuilds/queue";
import { nextTickAfter, ticksBetween } from "../rebuilds/schedule-times";
import { pausesSchedule, type TickingSchedule } from "../rebuilds/schedules";
import type { RedisKeys } from "../redis/keys";
import { ALREADY_REBUILT_REASON } from "../runs/records";
import { NEWEST_IN_INDEXES, runVariadicScript, UNSERVED_TICKS, type ScriptingClient } from "../redis/scripts";
import { HEARTBEAT_TTL_MS } from "../workers/heartbeat";

type Client = Pick<Redis, "pipeline">;

export interface RunningRun {
  id: string;
  rebuild: string;
  tenant: string | null;
  startedAt: number | null;
  createdAt: number;
}

export interface SeriesRuns {
  rebuild: string;
  tenant: string | null;
  /** Newest run of any status (createdAt ms), or null. */
  newestRunAt: number | null;
  /**
   * createdAt of the newest run that left the output up to date — rebuilt, or skipped because its
   * version was already rebuilt (the output serves it) — or null. A failure before it is moot.
   */
  newestUpToDateAt: number | null;
  /** Newest failed run, or null. */
  newestFailed: { id: string; createdAt: number; attempt: number; reason: string } | null;
  /** Due scheduled ticks (ms) in the window, oldest first, that no run answered. */
  unservedTicks: number[];
  /** The newest tick already counted as missed (metrics), or 0. */
  missedCountedUpTo: number;
}

export interface TakeoverEvent {
  id: string;
  at: number;
  claim: string;
  rebuild: string;
  tenant: string;
  fence: string;
  previousFence: string;
}

export interface AlertSnapshot {
  /** Main Redis time, ms. */
  now: number;
  /**
   * Claims census with `onlyStale`: `census.claims` holds the stale claims not refreshed for
   * `claimStaleForMs` (others cannot have been stale that long), read through the claimRefreshes index.
   */
  census: ClaimCensus;
  workersLive: number;
  /** Score of the newest worker heartbeat ever seen in the registry, or null. */
  newestBeat: number | null;
  running: RunningRun[];
  series: SeriesRuns[];
  redis: { main: RedisSafety; claims: RedisSafety };
  takeovers: TakeoverEvent[];
  /** alert id → since (ms): conditions held earlier without their own clock. */
  pending: Record<string, number>;
}

/** How far back scheduled ticks are considered (an older missed tick is history, not an alert). */
export const TICK_WINDOW_MS = 86_400_000;
/** Running runs examined per cycle (records of crashed attempts are closed by the next attempt). */
const RUNNING_LIMIT = 1_000;
const TAKEOVERS_LIMIT = 200;
/** Ticks recorded per series per cycle (a minute cron after a long outage stays bounded). */
const TICKS_PER_CYCLE = 1_000;

export async function redisTime(client: Pick<Redis, "time">): Promise<number> {
  const [seconds, micros] = await client.time();
  return Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
}

const seriesKey = (rebuild: string, tenant: string | null | undefined) => `${rebuild}|${tenant ?? ""}`;

/**
 * Records the scheduled ticks that came due since the last call; idempotent (ZADD, cursor).
 * `nextDue` (series → ms of its next tick) is the caller's memory between calls: series with no
 * tick due are skipped without parsing their cron expression or asking Redis.
 */
export async function recordExpectedTicks(
  main: Client,
  keys: RedisKeys,
  schedules: readonly TickingSchedule[],
  now: number,
  nextDue: Map<string, number> = new Map(),
): Promise<number> {
  // Remembered per schedule, not per series: a changed cron is asked anew.
  const dueKey = (s: TickingSchedule) => `${seriesKey(s.rebuild, s.tenant)}|${s.cron}|${s.tz}`;
  const series = schedules.filter((s) => {
    const due = nextDue.get(dueKey(s));
    return due === undefined || due <= now;
  });
  if (series.length === 0) return 0;
  const read = main.pipeline();
  for (const s of series) {
    read.hget(keys.alertsTickCursor, seriesKey(s.rebuild, s.tenant));
    read.get(keys.schedulerSince(schedulerIdOf(s.rebuild, s.tenant)));
    read.hget(keys.pausedSchedules, schedulerIdOf(s.rebuild, s.tenant));
  }
  const replies = (await read.exec()) ?? [];
  const write = main.pipeline();
  let recorded = 0;
  series.forEach((s, i) => {
    const cursor = Number(replies[i * 3]?.[1] ?? NaN);
    const since = Number(replies[i * 3 + 1]?.[1] ?? NaN);
    const paused = pausesSchedule(replies[i * 3 + 2]?.[1]);
    const key = dueKey(s);
    // A paused schedule expects no ticks (scheduleMissed stays quiet); resuming moves
    // `schedulerSince` to the resume, so the ticks while paused are never expected later either.
    if (paused) return void nextDue.set(key, now + 15_000);
    // Ticks before the scheduler existed cannot have been missed; none are expected without one.
    if (!Number.isFinite(since)) return void nextDue.set(key, now + 60_000);
    nextDue.set(key, nextTickAfter(s, now));
    const from = Math.max(Number.isFinite(cursor) ? cursor : since, since, now - TICK_WINDOW_MS);
    const ticks = ticksBetween(s, from, now, TICKS_PER_CYCLE);
    if (ticks.length === 0) return;
    const ticksKey = keys.expectedTicks(s.rebuild, s.tenant);
    write.zadd(ticksKey, ...ticks.flatMap((tick) => [tick, String(tick)]));
    write.zremrangebyscore(ticksKey, "-inf", now - 7 * TICK_WINDOW_MS);
    write.hset(keys.alertsTickCursor, seriesKey(s.rebuild, s.tenant), String(ticks[ticks.length - 1]));
    recorded += ticks.length;
  });
  if (recorded > 0) await write.exec();
  return recorded;
}

export async function readAlertSnapshot(
  main: Client & ScriptingClient,
  claims: Client & ScriptingClient,
  keys: RedisKeys,
  definitions: Definitions,
  options: {
    takeoverWindowMs: number;
    graceMs: number;
    /** The claimStale rule's `for`; omitted: every stale claim (none without the rule: MAX_SAFE_INTEGER). */
    claimStaleForMs?: number;
    /** Scheduler ids of the schedules that tick (tickingSchedules); omitted: the definitions' own. */
    ticking?: ReadonlySet<string>;
  },
): Promise<AlertSnapshot> {
  const seriesList: { rebuild: string; tenant: string | undefined; scheduled: boolean }[] = [];
  for (const definition of definitions.rebuilds.values()) {
    for (const tenant of tenantsOf(definition)) {
      const scheduled = options.ticking
        ? options.ticking.has(schedulerIdOf(definition.name, tenant))
        : Boolean(definition.schedule);
      seriesList.push({ rebuild: definition.name, tenant, scheduled });
    }
  }
  // Round trip 1 (main): time, workers, running runs, pending, each series' missed-tick cursor (only
  // those fields: the counters hash holds ~12 per series); the newest runs of every series (newest
  // of any status, rebuilt, failed) in one script call alongside.
  const indexKeys: string[] = [];
  for (const s of seriesList) {
    const filter = s.tenant ? { rebuild: s.rebuild, tenant: s.tenant } : { rebuild: s.rebuild };
    indexKeys.push(
      keys.runIndex(filter),
      keys.runIndex({ ...filter, status: "rebuilt" }),
      keys.runIndex({ ...filter, status: "failed" }),
      keys.runIndex({ ...filter, status: "skipped" }),
    );
  }
  const first = main
    .pipeline()
    .time()
    .zrevrange(keys.workerRegistry, 0, -1, "WITHSCORES")
    .zrange(keys.runIndex({ status: "running" }), "0", String(RUNNING_LIMIT - 1))
    .hgetall(keys.alertsPending);
  if (seriesList.length > 0) {
    first.hmget(keys.metricsCounters, ...seriesList.map((s) => `missedcursor|${seriesKey(s.rebuild, s.tenant)}`));
  }
  const [replies, newest] = await Promise.all([
    execOrThrow(first),
    runVariadicScript(main, NEWEST_IN_INDEXES, [keys.runIndex()], indexKeys, [0]) as Promise<string[]>,
  ]);
  const [seconds, micros] = replies[0] as [string, string];
  const now = Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
  const registry = replies[1] as string[];
  const liveIds = new Set<string>();
  let newestBeat: number | null = null;
  for (let i = 0; i < registry.length; i += 2) {
    const score = Number(registry[i + 1]);
    if (newestBeat === null || score > newestBeat) newestBeat = score;
    if (score >= now - HEARTBEAT_TTL_MS) liveIds.add(registry[i]!);
  }
  const runningIds = replies[2] as string[];
  const pendingHash = replies[3] as Record<string, string>;
  const missedCursors = (replies[4] ?? []) as (string | null)[];

  // Round trip 2 (main): running runs and newest failed runs (a pipeline), unserved ticks (a script).
  const second = main.pipeline();
  for (const id of runningIds) second.hmget(keys.run(id), "rebuild", "tenant", "startedAt", "createdAt", "status");
  const entry = (index: number) =>
    newest[index * 2] ? { id: newest[index * 2]!, at: Number(newest[index * 2 + 1]) } : null;
  /**
   * Each series' newest skipped run, when it is newer than its newest rebuilt and failed ones (its
   * reason is read below): with no failed run kept, too (a runFailed alert whose run retention
   * trimmed stays until the output is up to date again: rules.ts).
   */
  const newerSkips: ({ id: string; at: number } | null)[] = [];
  const series: SeriesRuns[] = seriesList.map((s, i) => {
    const [any, rebuilt, failed, skipped] = [entry(i * 4), entry(i * 4 + 1), entry(i * 4 + 2), entry(i * 4 + 3)];
    newerSkips.push(
      skipped && (!failed || skipped.at > failed.at) && (!rebuilt || skipped.at > rebuilt.at) ? skipped : null,
    );
    return {
      rebuild: s.rebuild,
      tenant: s.tenant ?? null,
      newestRunAt: any ? any.at : null,
      newestUpToDateAt: rebuilt ? rebuilt.at : null,
      newestFailed: failed ? { id: failed.id, createdAt: failed.at, attempt: 0, reason: "" } : null,
      unservedTicks: [],
      missedCountedUpTo: Number(missedCursors[i] ?? 0),
    };
  });
  for (const s of series) {
    if (s.newestFailed) second.hmget(keys.run(s.newestFailed.id), "attempt", "reason");
  }
  for (const skip of newerSkips) if (skip) second.hget(keys.run(skip.id), "reason");
  const scheduled = seriesList.map((s, i) => ({ ...s, runs: series[i]! })).filter((s) => s.scheduled);
  // A paused schedule misses nothing, also ticks recorded before its pause; nor does one before
  // it was set up or last resumed (schedulerSince): the banner's rule too (black-box helper-120).
  for (const s of scheduled) {
    second.get(keys.schedulerSince(schedulerIdOf(s.rebuild, s.tenant)));
    second.hget(keys.pausedSchedules, schedulerIdOf(s.rebuild, s.tenant));
  }
  const tickKeys: string[] = [];
  const tickArgs: number[] = [now - options.graceMs];
  for (const s of scheduled) {
    // Ticks due at least `grace` ago, after the newest run (a run that started answers them all).
    tickKeys.push(keys.expectedTicks(s.rebuild, s.tenant), keys.scheduleTicks(s.rebuild, s.tenant));
    tickArgs.push(Math.max(now - TICK_WINDOW_MS, s.runs.newestRunAt ?? 0));
  }
  const [secondReplies, unserved, census, mainSafety, claimsSafety, takeoverEntries] = await Promise.all([
    execOrThrow(second),
    runVariadicScript(main, UNSERVED_TICKS, [keys.runIndex()], tickKeys, tickArgs) as Promise<string[]>,
    // Only the claims stale for the rule's `for`: the rules alert on no other (the scrape reads them all).
    readClaimCensus(claims, keys, liveIds, { onlyStale: true, notRefreshedForMs: options.claimStaleForMs }),
    inspectRedis(main),
    inspectRedis(claims),
    readTakeovers(claims, keys, options.takeoverWindowMs),
  ]);
  let at = 0;
  const running: RunningRun[] = [];
  for (const id of runningIds) {
    const [rebuild, tenant, startedAt, createdAt, status] = secondReplies[at++] as (string | null)[];
    if (status !== "running" || !rebuild) continue;
    running.push({
      id,
      rebuild,
      tenant: tenant || null,
      startedAt: startedAt ? Number(startedAt) : null,
      createdAt: Number(createdAt ?? 0),
    });
  }
  for (const s of series) {
    if (!s.newestFailed) continue;
    const [attempt, reason] = secondReplies[at++] as (string | null)[];
    s.newestFailed.attempt = Number(attempt ?? 0);
    s.newestFailed.reason = reason ?? "";
  }
  newerSkips.forEach((skip, i) => {
    if (!skip) return;
    const reason = secondReplies[at++] as string | null;
    // Skipped as already rebuilt: the output serves its version (a skip behind a holder says nothing).
    if (reason?.startsWith(ALREADY_REBUILT_REASON)) series[i]!.newestUpToDateAt = skip.at;
  });
  scheduled.forEach((s, i) => {
    const since = Number(secondReplies[at++] ?? NaN);
    const paused = pausesSchedule(secondReplies[at++]);
    const ticks = unserved[i] ?? "";
    s.runs.unservedTicks =
      ticks === "" || paused
        ? []
        : ticks
            .split(",")
            .map(Number)
            .filter((tick) => !Number.isFinite(since) || tick >= since);
  });
  const pending: Record<string, number> = {};
  for (const [id, since] of Object.entries(pendingHash)) pending[id] = Number(since);
  return {
    now,
    census,
    workersLive: liveIds.size,
    newestBeat,
    running,
    series,
    redis: { main: mainSafety, claims: claimsSafety },
    takeovers: takeoverEntries,
    pending,
  };
}

async function readTakeovers(claims: Client, keys: RedisKeys, windowMs: number): Promise<TakeoverEvent[]> {
  const replies = await execOrThrow(claims.pipeline().time());
  const [seconds, micros] = replies[0] as [string, string];
  const claimsNow = Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
  const entries = await execOrThrow(
    claims.pipeline().xrevrange(keys.claimTakeovers, "+", String(claimsNow - windowMs), "COUNT", TAKEOVERS_LIMIT),
  );
  return (entries[0] as [string, string[]][]).map(([id, flat]) => {
    const fields: Record<string, string> = {};
    for (let i = 0; i < flat.length; i += 2) fields[flat[i]!] = flat[i + 1]!;
    return {
      id,
      at: Number(id.split("-")[0]),
      claim: fields.claim ?? "",
      rebuild: fields.rebuild ?? "",
      tenant: fields.tenant ?? "",
      fence: fields.fence ?? "",
      previousFence: fields.previousFence ?? "",
    };
  });
}

async function execOrThrow(pipeline: ReturnType<Redis["pipeline"]>): Promise<unknown[]> {
  const replies = (await pipeline.exec()) ?? [];
  const failed = replies.find(([error]) => error);
  if (failed) throw failed[0];
  return replies.map(([, value]) => value);
}
