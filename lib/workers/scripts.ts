/** The worker heartbeat script (lib/workers). */
import { SERVER_NOW, typedScript } from "../redis/scripts";

export const WORKER_BEAT = typedScript<[beatAt: number, streakSince: number]>()({
  command: "claimwatchWorkerBeat",
  keys: ["workerHeartbeat", "workerRegistry"],
  lua: `
--[[ One heartbeat, stamped with the Redis clock (never the worker's: hosts' clocks differ).
KEYS[1] workerHeartbeat HASH (identity fields + heartbeatAt + beatStreakSince), PX ttl
KEYS[2] workerRegistry ZSET workerId → last beat (Redis ms)
ARGV[1] workerId   ARGV[2] ttl ms   ARGV[3] registry entries older than this (ms) are dropped
ARGV[4] ms after the previous beat past which this one starts the streak again
ARGV[5..] identity field/value pairs
The streak (beatStreakSince): since when this worker's beats have come with no gap over ARGV[4]
— none after a write outage or a pause, whatever the worker thinks (RUN_ABANDON asks it of a
sweeping worker, lib/workers/heartbeat.ts BEAT_STREAK).
Returns {beat time, streak since} (Redis ms)
]]
${SERVER_NOW}
local previous = redis.call('HMGET', KEYS[1], 'heartbeatAt', 'beatStreakSince')
local last, since = tonumber(previous[1]), tonumber(previous[2])
if not last or not since or nowMs - last > tonumber(ARGV[4]) then since = nowMs end
redis.call('HSET', KEYS[1], unpack(ARGV, 5))
redis.call('HSET', KEYS[1], 'heartbeatAt', nowMs, 'beatStreakSince', since)
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('ZADD', KEYS[2], nowMs, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', nowMs - tonumber(ARGV[3]))
return {nowMs, since}
`,
});
