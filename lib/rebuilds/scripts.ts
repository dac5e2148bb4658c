/** Scripts of the rebuild queue: on-demand triggers (lib/rebuilds/trigger.ts), hand-backs (lib/rebuilds/queue.ts), schedules (lib/rebuilds/schedules.ts). */
import { SERVER_NOW, typedScript } from "../redis/scripts";
import { REPLY } from "../redis/replies";

export const REQUEST_ID_TAKE = typedScript<[taken: number, jobId: string, held: "same" | "other"]>()({
  command: "claimwatchRequestIdTake",
  keys: ["triggerRequest", "triggerRequestWhat"],
  lua: `
--[[ A request id taken for this request's job, or what holds it, in one step.
KEYS[1] triggerRequest STRING: the job id the request queued (the bare id: earlier versions read it)
KEYS[2] triggerRequestWhat STRING: the request's fingerprint (trigger.ts requestFingerprint)
ARGV[1] this request's job id   ARGV[2] its fingerprint   ARGV[3] ttl ms
Returns {1, ARGV[1], 'same'} taken: both written
  | {0, the job id it holds, 'same'} held by this request (its fingerprint; or none stored, an
    earlier version's id: this request's fingerprint is stored with it now)
  | {0, the job id it holds, 'other'} held by another request (nothing written)
]]
if redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[3], 'NX') then
  redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
  return {1, ARGV[1], 'same'}
end
local held = redis.call('GET', KEYS[1])
local what = redis.call('GET', KEYS[2])
if what and what ~= ARGV[2] then return {0, held, 'other'} end
if not what then
  local ttl = redis.call('PTTL', KEYS[1])
  if ttl <= 0 then ttl = tonumber(ARGV[3]) end
  redis.call('SET', KEYS[2], ARGV[2], 'PX', ttl)
end
return {0, held, 'same'}
`,
});

export const REQUEST_ID_RENAME = typedScript<[jobId: string, held: "same" | "other"]>()({
  command: "claimwatchRequestIdRename",
  keys: ["triggerRequest", "triggerRequestWhat"],
  lua: `
--[[ A request id names a job a failover lost (the id kept, the job not): a retry of the request
gives the id its own new job, but only if the id still names the lost one (or nothing). Two
retries of one id at once: one renames it, the other is answered with that one's job.
KEYS[1] triggerRequest STRING (the job id the request queued), PX ttl
KEYS[2] triggerRequestWhat STRING (the request's fingerprint), written with it when this retry takes it
ARGV[1] the lost job id   ARGV[2] this retry's job id   ARGV[3] ttl ms   ARGV[4] the fingerprint
Returns {job id the request id names now, 'same' | 'other'}: ARGV[2] when this retry took it,
else the other retry's (written again, so a WAIT after this call covers it), 'other' when that
one is another request's (the id expired meanwhile and another request took it: nothing written)
]]
local named = redis.call('GET', KEYS[1])
if not named or named == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  redis.call('SET', KEYS[2], ARGV[4], 'PX', ARGV[3])
  return {ARGV[2], 'same'}
end
local what = redis.call('GET', KEYS[2])
if what and what ~= ARGV[4] then return {named, 'other'} end
redis.call('SET', KEYS[1], named, 'PX', ARGV[3])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
return {named, 'same'}
`,
});

/**
 * BullMQ counts an attempt as started when a worker fetches the job (`ats`, the job's
 * attemptsStarted); a hand-back to waiting does not take it back. A job fetched by a worker that
 * is already stopping never ran: counted, it would number the next run attempt 2 and pass the
 * "first attempt" checks a paused schedule's tick gets (lib/rebuilds/schedules.ts).
 */
export const UNCOUNT_UNSTARTED = typedScript<number>()({
  command: "claimwatchUncountUnstarted",
  keys: ["jobLock", "job"],
  lua: `
--[[ Takes back the attempt BullMQ counted when this worker fetched a job it will not run, before
the job goes back to waiting. Only while this worker still holds the job's lock: then no other
fetch of it has been counted since this one (a lock that ran out leaves the count as it is: a gap
in the attempt numbers, never a number used twice). Once per call: the call's own id is marked on
the job (field cwUncounted), so a resend of this call after a lost reply changes nothing, also
when the lock ran out in between. (Not the lock token: BullMQ gives a worker's next fetch the same
token.)
KEYS[1] job lock STRING (BullMQ's: the fetching worker's token)   KEYS[2] job HASH (fields ats, cwUncounted)
ARGV[1] the lock token   ARGV[2] an id unique to this call (its resends carry the same)
Returns ${REPLY.done} when taken back (now or by an earlier send of this call; also when nothing was counted),
${REPLY.notOwner} when another token holds the lock, ${REPLY.missing} when no lock is held (it ran out):
nothing changed in either
]]
if redis.call('HGET', KEYS[2], 'cwUncounted') == ARGV[2] then return ${REPLY.done} end
local holder = redis.call('GET', KEYS[1])
if holder == false then return ${REPLY.missing} end
if holder ~= ARGV[1] then return ${REPLY.notOwner} end
redis.call('HSET', KEYS[2], 'cwUncounted', ARGV[2])
local started = tonumber(redis.call('HGET', KEYS[2], 'ats') or '0') or 0
if started > 0 then redis.call('HINCRBY', KEYS[2], 'ats', -1) end
return ${REPLY.done}
`,
});

export const SCHEDULE_DIGEST_KEEP = typedScript<number>()({
  command: "claimwatchScheduleDigestKeep",
  keys: ["scheduleDefinitions"],
  lua: `
--[[ The digest of the definitions every live worker runs (lib/rebuilds/schedules.ts), kept
alive by a worker whose definitions it names.
KEYS[1] scheduleDefinitions STRING with a TTL
ARGV[1] this worker's digest   ARGV[2] ttl ms
Returns 1 kept (it is this worker's: its TTL renewed) | 0 another's, or gone (nothing written)
]]
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
`,
});

export const SCHEDULE_WANTS_NOTE = typedScript<[now: number, workerNotes: string[], fileNotes: string[]]>()({
  command: "claimwatchScheduleWantsNote",
  keys: ["scheduleWorkers", "scheduleWants"],
  lua: `
--[[ A worker's note of the file it runs and that file's schedules (lib/rebuilds/schedule-wants.ts),
and every worker's: what the schedules of workers of different definitions side by side agree on.
KEYS[1] scheduleWorkers HASH workerId → "<Redis ms of its last note> <schedules digest>"
KEYS[2] scheduleWants HASH schedules digest → JSON {scheduler id: spec key}
ARGV[1] workerId   ARGV[2] its schedules digest   ARGV[3] its file's schedules (JSON)
ARGV[4] notes older than this (ms) are dropped, and the files no note names
Returns {now (Redis ms), scheduleWorkers as a flat list, scheduleWants as a flat list}
]]
${SERVER_NOW}
redis.call('HSET', KEYS[1], ARGV[1], string.format('%.0f', nowMs) .. ' ' .. ARGV[2])
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
local workers = redis.call('HGETALL', KEYS[1])
local kept, named = {}, {}
for i = 1, #workers, 2 do
  local at, digest = string.match(workers[i + 1], '^(%d+) (.+)$')
  if at and tonumber(at) >= nowMs - tonumber(ARGV[4]) then
    named[digest] = true
    kept[#kept + 1] = workers[i]
    kept[#kept + 1] = workers[i + 1]
  else
    redis.call('HDEL', KEYS[1], workers[i])
  end
end
local files = redis.call('HGETALL', KEYS[2])
local keptFiles = {}
for i = 1, #files, 2 do
  if named[files[i]] then
    keptFiles[#keptFiles + 1] = files[i]
    keptFiles[#keptFiles + 1] = files[i + 1]
  else
    redis.call('HDEL', KEYS[2], files[i])
  end
end
return {nowMs, kept, keptFiles}
`,
});
