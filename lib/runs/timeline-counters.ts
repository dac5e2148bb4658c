/**
 * Timeline counters: per hour of run starts and per lane, how many runs reached each final status
 * and their summed duration, so the zoomed-out timeline reads at most a few hundred small hashes
 * instead of thousands of run records (lib/runs/buckets.ts reads them).
 *
 * Written in one place: the record scripts (scripts.ts, `countFinal`) at the one moment a record
 * moves from queued/running into a final status — a final record never moves again and a missing
 * (trimmed, expired) record is never recreated, so each run is counted exactly once — and
 * `queueTimelineCount` for history seeded with `importRunInto`. This file owns the layout:
 *
 *   rebuild level  keys.timelineBucket(hour)           lane = the rebuild ('' when the job named
 *                                                       no valid rebuild), tenants summed
 *   tenant level   keys.timelineBucket(hour, rebuild)  lane = the tenant ('' for none)
 *   field          the lane → its runs and their summed durationMs per final status, packed
 *                  (`rebuilt=12/480000,failed=1/3000`: `parseLaneCounts`)
 *
 * A run is counted in the hour of its attempt's start (its index score), where the per-run
 * timeline draws it. Retention: each hash expires (PEXPIREAT) the record TTL after its hour ends,
 * when every record of that hour is gone too. Trimming records (by count or age, trim.ts) does not
 * uncount them: the counters are the history of what finished, and a bucket may count runs whose
 * records were trimmed since (documented on the Runs page's API, lib/api/timeline.ts).
 */
import type { ChainableCommander } from "ioredis";
import type { RedisKeys } from "../redis/keys";
import { typedScript } from "../redis/scripts";
import { recordTtlMs, type RunPlace, type RunRetention } from "./records";
import type { FinalRunStatus } from "./transitions";

/** One counter bucket: an hour of run starts (Redis clock), aligned to the epoch. */
export const TIMELINE_BUCKET_MS = 3_600_000;

export const bucketStartOf = (ms: number) => ms - (ms % TIMELINE_BUCKET_MS);

/**
 * A lane's counts in one hour, packed in one field (`<status>=<runs>/<summed durationMs>`, comma
 * separated): a week's answer parses one field per lane and hour instead of two per outcome.
 */
export function parseLaneCounts(packed: string): { status: string; runs: number; durationMs: number }[] {
  const out: { status: string; runs: number; durationMs: number }[] = [];
  for (const part of packed.split(",")) {
    const match = /^([a-z]+)=(\d+)\/(\d+)$/.exec(part);
    if (match) out.push({ status: match[1]!, runs: Number(match[2]), durationMs: Number(match[3]) });
  }
  return out;
}

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
    ...(place.rebuild ? { t: keys.timelineBucketPrefix(place.rebuild), tenant: place.tenant ?? "" } : {}),
  });
}

/**
 * `setTimeline(spec)` then `countFinal(status, startMs, durationMs)` in a record script. The only
 * keys a record script does not get in KEYS: their name holds the hour of the run's start, which
 * only the script knows (a record's start is on the Redis clock). Like BullMQ's scripts appending
 * a job id to the queue prefix, it appends the hour to a prefix built in keys.ts; the prefix
 * carries the same hash tag, so every key stays in the script's slot.
 */
export const TIMELINE_COUNT_LUA = `
${ADD_COUNT_LUA}
local TIMELINE = false
local function setTimeline(spec)
  if spec and spec ~= '' then TIMELINE = cjson.decode(spec) end
end
local function countFinal(status, startMs, durationMs)
  if not TIMELINE then return end
  local start = tonumber(startMs)
  local bucket = start - (start % TIMELINE.ms)
  local expireAt = string.format('%.0f', bucket + TIMELINE.ms + TIMELINE.ttl)
  local hour = string.format('%.0f', bucket)
  addCount(TIMELINE.r .. hour, TIMELINE.rebuild, status, durationMs, expireAt)
  if TIMELINE.t then addCount(TIMELINE.t .. hour, TIMELINE.tenant, status, durationMs, expireAt) end
end
`;

/**
 * Counts one seeded finished record (importRunInto only; the record scripts count the rest).
 * Sent with EVAL: `tx` may come from a client the scripts were never defined on (a test's or a
 * bench's MULTI); Redis caches the script after the first call.
 */
export const TIMELINE_IMPORT = typedScript<number>()({
  command: "claimwatchTimelineImport",
  keys: ["rebuildBucket"],
  variadicKeys: true,
  lua: `
--[[ Count one finished run in the timeline counters of its start's hour.
KEYS[1] rebuild-level bucket HASH   KEYS[2] (if the run has a valid rebuild) tenant-level bucket HASH
ARGV[1] status   ARGV[2] durationMs ('' unknown)   ARGV[3] PEXPIREAT of both (ms)
ARGV[4] rebuild lane   ARGV[5] tenant lane
Returns 1
]]
${ADD_COUNT_LUA}
addCount(KEYS[1], ARGV[4], ARGV[1], ARGV[2], ARGV[3])
if KEYS[2] then addCount(KEYS[2], ARGV[5], ARGV[1], ARGV[2], ARGV[3]) end
return 1
`,
});

/** `countFinal` for a seeded finished record, queued into `tx` (importRunInto only). */
export function queueTimelineCount(
  tx: ChainableCommander,
  keys: RedisKeys,
  place: RunPlace,
  retention: RunRetention,
  run: { status: FinalRunStatus; startMs: number; durationMs: number | null },
): void {
  const bucket = bucketStartOf(run.startMs);
  const expireAt = bucket + TIMELINE_BUCKET_MS + recordTtlMs(retention);
  const bucketKeys = [keys.timelineBucket(bucket)];
  if (place.rebuild) bucketKeys.push(keys.timelineBucket(bucket, place.rebuild));
  tx.eval(
    TIMELINE_IMPORT.lua,
    bucketKeys.length,
    ...bucketKeys,
    run.status,
    run.durationMs === null ? "" : Math.round(run.durationMs),
    expireAt,
    place.rebuild ?? "",
    place.tenant ?? "",
  );
}
