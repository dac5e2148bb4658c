/**
 * Counters that must survive restarts and read the same from every process: kept in Redis, one
 * HASH per server, incremented where the event happens and read at scrape time (lib/metrics/collect).
 * The run counters are written by the run-record scripts themselves (`RUN_COUNTERS_LUA`).
 *
 * Field layout (rebuild and tenant names never contain '|'; a claim name comes last, whole):
 *   main Redis   `metricsCounters`
 *     runs|<rebuild>|<tenant>|<status>   runs finished with that status
 *     dur|<rebuild>|<tenant>|<le>        finished runs whose duration falls in that bucket (not cumulative)
 *     dursum|<rebuild>|<tenant>          sum of durations, seconds
 *     durcount|<rebuild>|<tenant>        runs with a duration
 *     lastsuccess|<rebuild>|<tenant>     finish time of the newest rebuilt run, ms
 *     missed|<rebuild>|<tenant>          scheduled ticks that produced no run within the grace
 *   claims Redis `claimCounters`
 *     takeovers|<rebuild>|<tenant>       claims taken over from an earlier, dead attempt
 *     fencing|<claim>                    publishes refused by the fence
 */
import type { Redis } from "ioredis";
import type { RedisKeys } from "../redis/keys";

/** Upper bounds of the run-duration histogram, seconds (a rebuild runs seconds to hours). */
export const DURATION_BUCKETS = [1, 5, 15, 60, 300, 900, 1800, 3600, 7200, 14400, 43200] as const;

/** `rebuild|tenant`, as the counters' fields name a series. */
export const runSeries = (rebuild: string, tenant: string | null | undefined) => `${rebuild}|${tenant ?? ""}`;

/**
 * The run counters in Lua, for the run-record scripts (lib/runs/scripts.ts, through the timeline
 * counters' `countFinal`): `countRun(key, series, status, durationMs, finishedAt)` is called in the
 * same script that moves a record into a final status, so each attempt is counted exactly once
 * and atomically with its final record, whoever closes it (its own worker, the next attempt, the
 * abandoned-run sweep). `durationMs` is nil for an attempt that did not run (skipped, deferred,
 * ended where it began) or whose end nobody saw (closed as abandoned): it enters `runs|…` only.
 */
export const RUN_COUNTERS_LUA = `
local DURATION_BOUNDS = {${DURATION_BUCKETS.join(", ")}}
local function countRun(key, series, status, durationMs, finishedAt)
  redis.call('HINCRBY', key, 'runs|' .. series .. '|' .. status, 1)
  if durationMs and durationMs >= 0 then
    local seconds = durationMs / 1000
    local le = '+Inf'
    for _, bound in ipairs(DURATION_BOUNDS) do
      if seconds <= bound then
        le = tostring(bound)
        break
      end
    end
    redis.call('HINCRBY', key, 'dur|' .. series .. '|' .. le, 1)
    redis.call('HINCRBYFLOAT', key, 'dursum|' .. series, string.format('%.3f', seconds))
    redis.call('HINCRBY', key, 'durcount|' .. series, 1)
  end
  -- Only ever forward: a run closed late (its final record lost) may have published before the
  -- last success counted since; one whose publish time is not known (finishedAt nil) claims none.
  if status == 'rebuilt' and finishedAt then
    local field = 'lastsuccess|' .. series
    local last = tonumber(redis.call('HGET', key, field))
    if not last or finishedAt > last then redis.call('HSET', key, field, string.format('%.0f', finishedAt)) end
  end
end
`;

export interface TakeoverEvent {
  claim: string;
  rebuild: string | null | undefined;
  tenant: string | null | undefined;
  fence: number;
  previousFence: number | null;
  jobId: string | null | undefined;
}

/** Takeover events kept for the `takeover` alert (claims Redis stream, approximately capped). */
const TAKEOVERS_KEPT = 1_000;

/** One takeover: its counter and an event for the alert evaluator, in one MULTI. */
export async function recordTakeover(
  client: Pick<Redis, "multi">,
  keys: RedisKeys,
  event: TakeoverEvent,
): Promise<void> {
  await client
    .multi()
    .hincrby(keys.claimCounters, `takeovers|${event.rebuild ?? ""}|${event.tenant ?? ""}`, 1)
    .xadd(
      keys.claimTakeovers,
      "MAXLEN",
      "~",
      TAKEOVERS_KEPT,
      "*",
      "claim",
      event.claim,
      "rebuild",
      event.rebuild ?? "",
      "tenant",
      event.tenant ?? "",
      "fence",
      String(event.fence),
      "previousFence",
      String(event.previousFence ?? ""),
      "jobId",
      event.jobId ?? "",
    )
    .exec();
}

/** One publish refused by the fence (a holder that lost its claim tried to publish). */
export async function recordFencingRejection(
  client: Pick<Redis, "hincrby">,
  keys: RedisKeys,
  claim: string,
): Promise<void> {
  await client.hincrby(keys.claimCounters, `fencing|${claim}`, 1);
}
