/** The worker heartbeat script (lib/workers). */
import { SERVER_NOW, typedScript } from "../redis/scripts";

export const WORKER_BEAT = typedScript<number>()({
  command: "claimwatchWorkerBeat",
  keys: ["workerHeartbeat", "workerRegistry"],
  lua: `
--[[ One heartbeat, stamped with the Redis clock (never the worker's: hosts' clocks differ).
KEYS[1] workerHeartbeat HASH (identity fields + heartbeatAt), PX ttl
KEYS[2] workerRegistry ZSET workerId → last beat (Redis ms)
ARGV[1] workerId   ARGV[2] ttl ms   ARGV[3] registry entries older than this (ms) are dropped
ARGV[4..] identity field/value pairs
Returns the beat's time (Redis ms)
]]
${SERVER_NOW}
redis.call('HSET', KEYS[1], unpack(ARGV, 4))
redis.call('HSET', KEYS[1], 'heartbeatAt', nowMs)
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('ZADD', KEYS[2], nowMs, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', nowMs - tonumber(ARGV[3]))
return nowMs
`,
});
