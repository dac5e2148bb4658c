/**
 * Timeline counters: per hour of run starts and per lane, how many runs reached each final status
 * and their summed duration, so the zoomed-out timeline reads at most a few hundred small hashes
 * instead of thousands of run records (lib/runs/buckets.ts reads them).
 *
 * Written in one place: the record scripts (scripts.ts, `countFinal`) at the one moment a record
 * moves from queued/running into a final status — a final record never moves again and a missing
 * (trimmed, expired) record is never recreated — and `TIMELINE_COUNT_RECORD` for history seeded
 * with `importRunInto` and for the backfill of records finished before the counters existed
 * (timeline-backfill.ts). Each marks the record it counts (`TIMELINE_COUNTED_FIELD`) in the same
 * script, and the latter counts only unmarked records, so each run is counted exactly once.
 * This file owns the layout:
 *
 *   rebuild level  keys.timelineBucket(hour)           lane = the rebuild ('' when the job named
 *                                                       no valid rebuild), tenants summed
 *   tenant level   keys.timelineBucket(hour, rebuild)  lane = the tenant ('' for none)
 *   field          the lane → its runs and their summed durationMs per final status, packed
 *                  (`rebuilt=12/480000,failed=1/3000`: `forEachLaneCount`)
 *
 * A run is counted in the hour of its attempt's start (its index score), where the per-run
 * timeline draws it. Retention: each hash expires (PEXPIREAT) the record TTL after its hour ends,
 * when every record of that hour is gone too. Trimming records (by count or age, trim.ts) does not
 * uncount them: the counters are the history of what finished, and a bucket may count runs whose
 * records were trimmed since (documented on the Runs page's API, lib/api/timeline.ts).
 */
import type { ChainableCommander } from "ioredis";
import { RUN_COUNTERS_LUA, runSeries } from "../metrics/counters";
import type { RedisKeys } from "../redis/keys";
import { typedScript } from "../redis/scripts";
import { recordTtlMs, type RunPlace, type RunRetention } from "./records";
import { RUN_REPLY } from "../redis/replies";
import { FINAL_STATUSES } from "./transitions";

/** One counter bucket: an hour of run starts (Redis clock), aligned to the epoch. */
export const TIMELINE_BUCKET_MS = 3_600_000;

export const bucketStartOf = (ms: number) => ms - (ms % TIMELINE_BUCKET_MS);

/**
 * A lane's counts in one hour, packed in one field (`<status>=<runs>/<summed durationMs>`, comma
 * separated): a week's answer parses one field per lane and hour instead of two per outcome.
 * Calls `each` per well-formed part, allocating nothing (a week at ~100 lanes is ~100 000 parts:
 * a regex and an object per part cost more than reading the hashes). Malformed parts are skipped.
 */
export function forEachLaneCount(
  packed: string,
  each: (status: string, runs: number, durationMs: number) => void,
): void {
  let from = 0;
  while (from < packed.length) {
    let end = packed.indexOf(",", from);
    if (end === -1) end = packed.length;
    const eq = packed.indexOf("=", from);
    const slash = eq === -1 ? -1 : packed.indexOf("/", eq);
    if (eq > from && slash > eq + 1 && slash < end - 1 && isLowerWord(packed, from, eq)) {
      const runs = digitsValue(packed, eq + 1, slash);
      const durationMs = digitsValue(packed, slash + 1, end);
      if (runs >= 0 && durationMs >= 0) each(packed.slice(from, eq), runs, durationMs);
    }
    from = end + 1;
  }
}

const isLowerWord = (text: string, from: number, to: number) => {
  for (let i = from; i < to; i++) {
    const c = text.charCodeAt(i);
    if (c < 97 || c > 122) return false;
  }
  return true;
};

/** The whole number written in text[from, to), or -1 when it is not only digits. */
const digitsValue = (text: string, from: number, to: number) => {
  let value = 0;
  for (let i = from; i < to; i++) {
    const d = text.charCodeAt(i) - 48;
    if (d < 0 || d > 9) return -1;
    value = value * 10 + d;
  }
  return value;
};

/**
 * `addCount(key, lane, status, durationMs, expireAt)`: one run into a lane's packed field
 * (read, add, write back: atomic inside the script).
 */
const ADD_COUNT_LUA = `
local function addCount(key, lane, status, durationMs, expireAt)
  local packed = redis.call('HGET', key, lane)
  local parts, found = {}, false
  local ms = tonumber(durationMs) or 0
  if packed then
    for name, runs, summed in string.gmatch(packed, '([a-z]+)=(%d+)/(%d+)') do
      if name == status then
        runs = tonumber(runs) + 1
        summed = tonumber(summed) + ms
        found = true
      end
      parts[#parts + 1] = name .. '=' .. string.format('%.0f', runs) .. '/' .. string.format('%.0f', summed)
    end
  end
  if not found then parts[#parts + 1] = status .. '=1/' .. string.format('%.0f', ms) end
  redis.call('HSET', key, lane, table.concat(parts, ','))
  redis.call('PEXPIREAT', key, expireAt)
end
`;

/**
 * What a record script needs to count a run of `place` (one ARGV, JSON; see `TIMELINE_COUNT_LUA`):
 * the key prefixes come from keys.ts, the script appends the bucket start it computes.
 */
export function timelineSpec(keys: RedisKeys, place: RunPlace, retention: RunRetention): string {
  return JSON.stringify({
    ms: TIMELINE_BUCKET_MS,
    ttl: recordTtlMs(retention),
    r: keys.timelineBucketPrefix(),
    rebuild: place.rebuild ?? "",
    ...(place.rebuild
      ? {
          t: keys.timelineBucketPrefix(place.rebuild),
          tenant: place.tenant ?? "",
          // Its series in the run counters behind /metrics (lib/metrics/counters; the hash is a
          // KEY of the script): a run that names no valid rebuild has none and is not counted there.
          s: runSeries(place.rebuild, place.tenant),
        }
      : {}),
  });
}

/**
 * The record field that says "counted in the timeline counters" ('1'), set by whichever script
 * counts the record, in the same atomic step: `countFinal` (the record scripts) and
 * `TIMELINE_COUNT_RECORD` (seeding and the backfill, which count only a record without it).
 */
export const TIMELINE_COUNTED_FIELD = "timelineCounted";

/**
 * `setTimeline(spec, runCountersKey)` then `countFinal(runKey, status, startMs, durationMs, ranMs,
 * finishedAt)` in a record script; the run is also counted in the run counters behind /metrics
 * (lib/metrics/counters `countRun`, the hash passed in KEYS) in the same step, with `ranMs` as
 * its duration (nil: it did not run, or nobody saw it end).
 * The only keys a record script does not get in KEYS: their name holds the hour of the run's
 * start, which only the script knows (a record's start is on the Redis clock). Like BullMQ's
 * scripts appending a job id to the queue prefix, it appends the hour to a prefix built in
 * keys.ts; the prefix carries the same hash tag, so every key stays in the script's slot.
 * Counting marks the record (`TIMELINE_COUNTED_FIELD`) so the backfill never counts it again; a
 * call without a spec counts nothing and leaves the record unmarked (the backfill counts it).
 */
export const TIMELINE_COUNT_LUA = `
${ADD_COUNT_LUA}
${RUN_COUNTERS_LUA}
local TIMELINE = false
local RUN_COUNTERS = false
local function setTimeline(spec, runCountersKey)
  if spec and spec ~= '' then TIMELINE = cjson.decode(spec) end
  RUN_COUNTERS = runCountersKey or false
end
local function countFinal(runKey, status, startMs, durationMs, ranMs, finishedAt)
  if not TIMELINE then return end
  if RUN_COUNTERS and TIMELINE.s then countRun(RUN_COUNTERS, TIMELINE.s, status, ranMs, finishedAt) end
  local start = tonumber(startMs)
  local bucket = start - (start % TIMELINE.ms)
  local expireAt = string.format('%.0f', bucket + TIMELINE.ms + TIMELINE.ttl)
  local hour = string.format('%.0f', bucket)
  addCount(TIMELINE.r .. hour, TIMELINE.rebuild, status, durationMs, expireAt)
  if TIMELINE.t then addCount(TIMELINE.t .. hour, TIMELINE.tenant, status, durationMs, expireAt) end
  redis.call('HSET', runKey, '${TIMELINE_COUNTED_FIELD}', '1')
end
`;

const FINAL_LUA = `{${FINAL_STATUSES.map((status) => `['${status}'] = true`).join(", ")}}`;

/**
 * Counts one record unless it is counted already: seeded history (`importRunInto`) and the
 * backfill (timeline-backfill.ts). Keys and ARGV: `timelineCountCall`.
 */
export const TIMELINE_COUNT_RECORD = typedScript<number>()({
  command: "claimwatchTimelineCountRecord",
  keys: ["run"],
  variadicKeys: true,
  lua: `
--[[ Count one final run record in the timeline counters of its start's hour, once.
KEYS[1] run HASH   KEYS[2] rebuild-level bucket HASH of the hour of the run's start (its index score)
KEYS[3] (if the run has a valid rebuild) its tenant-level bucket HASH of that hour
ARGV[1] PEXPIREAT of the buckets (ms)   ARGV[2] rebuild lane   ARGV[3] tenant lane
The status and durationMs are the record's; '${TIMELINE_COUNTED_FIELD}' is set with the count.
Returns ${RUN_REPLY.written} counted | ${RUN_REPLY.no} counted already (marked) | ${RUN_REPLY.notFinal} still queued or running (the
  script that finishes it counts it) | ${RUN_REPLY.missing} missing (trimmed or expired)
]]
${ADD_COUNT_LUA}
local FINAL = ${FINAL_LUA}
local record = redis.call('HMGET', KEYS[1], 'status', 'durationMs', '${TIMELINE_COUNTED_FIELD}')
if not record[1] then return ${RUN_REPLY.missing} end
if record[3] then return ${RUN_REPLY.no} end
if not FINAL[record[1]] then return ${RUN_REPLY.notFinal} end
addCount(KEYS[2], ARGV[2], record[1], record[2], ARGV[1])
if KEYS[3] then addCount(KEYS[3], ARGV[3], record[1], record[2], ARGV[1]) end
redis.call('HSET', KEYS[1], '${TIMELINE_COUNTED_FIELD}', '1')
return ${RUN_REPLY.written}
`,
});

/** KEYS and ARGV of `TIMELINE_COUNT_RECORD` for the record `runId` of `place`, started at `startMs` (its index score). */
export function timelineCountCall(
  keys: RedisKeys,
  place: RunPlace,
  retention: RunRetention,
  runId: string,
  startMs: number,
): { keys: string[]; args: string[] } {
  const bucket = bucketStartOf(startMs);
  const expireAt = bucket + TIMELINE_BUCKET_MS + recordTtlMs(retention);
  const callKeys = [keys.run(runId), keys.timelineBucket(bucket)];
  if (place.rebuild) callKeys.push(keys.timelineBucket(bucket, place.rebuild));
  return { keys: callKeys, args: [String(expireAt), place.rebuild ?? "", place.tenant ?? ""] };
}

/**
 * Counts a seeded finished record queued into `tx` just before (importRunInto only). Sent with
 * EVAL: `tx` may come from a client the scripts were never defined on (a test's or a bench's
 * MULTI); Redis caches the script after the first call.
 */
export function queueTimelineCount(
  tx: ChainableCommander,
  keys: RedisKeys,
  place: RunPlace,
  retention: RunRetention,
  runId: string,
  startMs: number,
): void {
  const call = timelineCountCall(keys, place, retention, runId, startMs);
  tx.eval(TIMELINE_COUNT_RECORD.lua, call.keys.length, ...call.keys, ...call.args);
}

/**
 * Raises the backfill's cursor (timeline-backfill.ts), never lowers it: passes in several
 * processes each write a value true on its own, and the highest of them is true too.
 */
export const TIMELINE_BACKFILL_CURSOR = typedScript<string>()({
  command: "claimwatchTimelineBackfillCursor",
  keys: ["cursor"],
  lua: `
--[[ Raise the timeline backfill's cursor.
KEYS[1] cursor STRING (an index score, ms; no TTL)
ARGV[1] the score below which the caller found every record final and counted
Returns the cursor now stored (the higher of the two)
]]
local current = tonumber(redis.call('GET', KEYS[1]))
local proposed = tonumber(ARGV[1])
if current and current >= proposed then return tostring(current) end
redis.call('SET', KEYS[1], ARGV[1])
return ARGV[1]
`,
});
