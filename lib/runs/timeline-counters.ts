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
 *   fields         `<lane>|<status>` = runs, `<lane>|<status>|ms` = their summed durationMs
 *
 * A run is counted in the hour of its attempt's start (its index score), where the per-run
 * timeline draws it. Retention: each hash expires (PEXPIREAT) the record TTL after its hour ends,
 * when every record of that hour is gone too. Trimming records (by count or age, trim.ts) does not
 * uncount them: the counters are the history of what finished, and a bucket may count runs whose
 * records were trimmed since (documented on the Runs page's API, lib/api/timeline.ts).
 */
import type { ChainableCommander } from "ioredis";
import type { RedisKeys } from "../redis/keys";
import { recordTtlMs, type RunPlace, type RunRetention } from "./records";
import type { FinalRunStatus } from "./transitions";

/** One counter bucket: an hour of run starts (Redis clock), aligned to the epoch. */
export const TIMELINE_BUCKET_MS = 3_600_000;

export const bucketStartOf = (ms: number) => ms - (ms % TIMELINE_BUCKET_MS);

/** The field names of one lane and status (names never contain '|': lib/names.ts). */
export const countField = (lane: string, status: string) => `${lane}|${status}`;
export const durationField = (lane: string, status: string) => `${lane}|${status}|ms`;

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
  local function add(key, lane)
    redis.call('HINCRBY', key, lane .. '|' .. status, 1)
    if durationMs then
      redis.call('HINCRBY', key, lane .. '|' .. status .. '|ms', string.format('%.0f', durationMs))
    end
    redis.call('PEXPIREAT', key, expireAt)
  end
  add(TIMELINE.r .. hour, TIMELINE.rebuild)
  if TIMELINE.t then add(TIMELINE.t .. hour, TIMELINE.tenant) end
end
`;

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
  const add = (key: string, lane: string) => {
    tx.hincrby(key, countField(lane, run.status), 1);
    if (run.durationMs !== null) tx.hincrby(key, durationField(lane, run.status), Math.round(run.durationMs));
    tx.pexpireat(key, expireAt);
  };
  add(keys.timelineBucket(bucket), place.rebuild ?? "");
  if (place.rebuild) add(keys.timelineBucket(bucket, place.rebuild), place.tenant ?? "");
}
