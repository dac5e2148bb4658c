/**
 * The run-record scripts: every write to a run record, its indexes, its log, the job's
 * "attempt in flight" pointer and (with the final record) the idempotency key. Only
 * `lib/runs/` calls them (`writer.ts`, `trim.ts`, `abandoned.ts`).
 *
 * Index layout, shared by every script (KEYS after the named ones): the run's `n` base indexes
 * (all runs, its rebuild, its rebuild and tenant — see `indexLayout` in records.ts), then the
 * same `n` for each status named in an ARGV list (only the statuses the call may touch, so a
 * call passes few keys). A run is in exactly one status's indexes:
 * the one its hash says, since both are written in one script. Index scores are the attempt's
 * own start on the Redis clock (ms), written once when the attempt begins.
 *
 * Status moves are checked against `RUN_TRANSITIONS` (transitions.ts) inside the script: a final
 * status is never changed, and a record that is gone (trimmed, expired) is never recreated by a
 * late write. Times (`startedAt`, `finishedAt`, `durationMs`, index scores) come from `TIME`.
 *
 * Timeline counters (timeline-counters.ts) and the run counters behind /metrics
 * (lib/metrics/counters): every branch that moves a record into a final status counts it
 * (`countFinal`) in the same script and marks the record counted, so a run is counted exactly
 * when its record becomes final, once (the backfill counts only unmarked records, and only in
 * the timeline). Events (lib/events): RUN_BEGIN and RUN_WRITE write the live stream's entry for
 * the change in the same script, so a dashboard never sees an event for a write that failed. The scripts get the counters' key prefixes in one ARGV (`timeline`, JSON) and
 * append the hour of the run's start — the one place they name a key not passed in KEYS.
 */
import { RUN_REPLY } from "../redis/replies";
import { PUBLISH_EVENT_LUA, SERVER_NOW, typedScript, type LuaScript } from "../redis/scripts";
import {
  FORCE_RELEASED_FIELD,
  MADE_CURRENT_LATER_FIELD,
  UNLISTED_FIELD,
  PUBLISHING_FIELD,
  PROOF_PATIENCE_MS,
  PUBLISHING_PROTECTED_MS,
  RUN_LOG_LUA,
} from "./records";
import { TIMELINE_BACKFILL_CURSOR, TIMELINE_COUNT_LUA, TIMELINE_COUNT_RECORD } from "./timeline-counters";
import { transitionsLua } from "./transitions";

/**
 * Lua: `incarnation()` (this Redis's run_id and replication id) and `markOf(ownKey, laneKey, noLane)`: the run an
 * idempotency key names and whether its mark counts for a skip here (comment below). In COMMON
 * and in READ_REBUILT_MARK.
 */
const REBUILT_MARK_LUA = `
-- A mark counts for a skip (markOf) only in the incarnation of this Redis it was made in, by a
-- publish the lane knew to be its newest ('markedIn'): a Redis restarted from an older snapshot,
-- or a replica promoted in a failover, may have lost the writes that unmarked it (another
-- version published since: helper-142), and the run that would have carried them is done. A mark
-- of another incarnation sends the request through the claim, where the claims Redis's published
-- pointer decides (lib/rebuilds/rebuilt-by-now.ts). The incarnation is the server's run_id (new
-- at every start) with its replication id (new at every promotion: a node failed back to keeps
-- its run_id, review helper-144); '?' where INFO is refused (an ACL without it), and a mark made
-- or read there never counts: such a Redis cannot tell a restart, so every repeat asks the claim
-- (slower, never wrong; the dashboard's health check, which reads INFO too, reports the refusal).
local incarnationOf = false
local function incarnation()
  if not incarnationOf then
    local server = redis.pcall('INFO', 'server')
    local replication = redis.pcall('INFO', 'replication')
    local runId = type(server) == 'string' and string.match(server, 'run_id:(%x+)')
    local replId = type(replication) == 'string' and string.match(replication, 'master_replid:(%x+)')
    incarnationOf = (runId and replId) and (runId .. ':' .. replId) or '?'
  end
  return incarnationOf
end
-- The run ownKey names as having rebuilt its version, and whether that mark counts here (above);
-- false when there is none. Without a lane (KEYS[1] passed again: a job naming no valid rebuild,
-- which publishes nothing) the key counts as it is.
local function markOf(ownKey, laneKey, noLane)
  local by = redis.call('GET', ownKey)
  if not by then return false, false end
  if laneKey == noLane then return by, true end
  local lane = redis.pcall('HMGET', laneKey, 'key', 'markedIn')
  if type(lane) ~= 'table' or lane.err then return by, false end
  return by, lane[1] == ownKey and lane[2] == incarnation() and lane[2] ~= '?'
end
`;

const COMMON = `
${SERVER_NOW}
${RUN_LOG_LUA}
${transitionsLua()}
${TIMELINE_COUNT_LUA}
${REBUILT_MARK_LUA}-- A lane (an output: its claim name, keys.rebuiltNow) marks at most one version rebuilt (its idempotency key: skipped as
-- already rebuilt), and only while that version is what the output serves and will serve. The
-- lane's HASH (keys.rebuiltNow): 'key' the idempotency key marked ('markedIn': the incarnation
-- in which the mark counts, markOf), 'fence' the newest publish recorded ('fenceIn': the
-- incarnation in which a publish's own write under its claim recorded it), 'building' the
-- idempotency key of the newest build begun. (The keys it names share
-- the hash tag: the same slot.)
-- A build of a version begins: another version marked no longer counts as rebuilt (a request
-- for it during this build builds after it, rather than being skipped while the output goes on
-- to serve this one); this build is the lane's newest.
-- A lane key of another type (a STRING an earlier build of this code wrote) is dropped, never an
-- error after the record's write.
local function laneHash(laneKey)
  local kind = redis.call('TYPE', laneKey)
  if type(kind) == 'table' then kind = kind.ok end
  if kind ~= 'hash' and kind ~= 'none' then redis.call('DEL', laneKey) end
end
local function laneBegins(laneKey, ownKey, ttlMs)
  laneHash(laneKey)
  local marked = redis.call('HGET', laneKey, 'key')
  if marked and marked ~= ownKey then
    redis.call('DEL', marked)
    redis.call('HDEL', laneKey, 'key')
  end
  redis.call('HSET', laneKey, 'building', ownKey)
  -- It lives at least as long as this build's record: its 'building' must outlast the build.
  if redis.call('PTTL', laneKey) < tonumber(ttlMs) then redis.call('PEXPIRE', laneKey, ttlMs) end
end
-- A run published its build with \`fence\` (its final write, or repair making it current): below
-- the newest fence recorded, nothing (another publish came after it). Else the output serves it:
-- another version's mark goes, and its own version is marked (SET ownKey runId PX ttl, NX when
-- asked) unless a build of another version began since (that one publishes after it).
-- The first half alone (laneFenceSeen) records the fence and unmarks another version: true when
-- the fence is not below the recorded one.
-- 'held': the publish's own final write while its claim was held, so the newest publish of the
-- lane: the lane's fence is then known in this incarnation ('fenceIn'). Any other write (sent
-- again after the release, a sweep's proven close, repair) marks for a skip only in a lane whose
-- fence is known in this incarnation: else the newest publish may be one this Redis lost.
local function laneFenceSeen(laneKey, ownKey, fence, ttlMs, held)
  laneHash(laneKey)
  local lane = redis.call('HMGET', laneKey, 'fence', 'key')
  if lane[1] and fence < tonumber(lane[1]) then return false end
  redis.call('HSET', laneKey, 'fence', fence)
  if held then redis.call('HSET', laneKey, 'fenceIn', incarnation()) end
  if lane[2] and lane[2] ~= ownKey then
    redis.call('DEL', lane[2])
    redis.call('HDEL', laneKey, 'key')
  end
  if redis.call('PTTL', laneKey) < tonumber(ttlMs) then redis.call('PEXPIRE', laneKey, ttlMs) end
  return true
end
local function lanePublished(laneKey, ownKey, runId, fence, ttlMs, nx, held)
  if not laneFenceSeen(laneKey, ownKey, fence, ttlMs, held) then return end
  local building = redis.call('HGET', laneKey, 'building')
  if building and building ~= ownKey then return end
  if nx then redis.call('SET', ownKey, runId, 'PX', ttlMs, 'NX') else redis.call('SET', ownKey, runId, 'PX', ttlMs) end
  if held or redis.call('HGET', laneKey, 'fenceIn') == incarnation() then
    redis.call('HSET', laneKey, 'key', ownKey, 'markedIn', incarnation())
  else
    redis.call('HSET', laneKey, 'key', ownKey)
    redis.call('HDEL', laneKey, 'markedIn')
  end
end
-- The statuses whose index keys follow the base indexes, in order (a comma-separated ARGV).
local POSITION = {}
local function setStatuses(list)
  local i = 0
  for status in string.gmatch(list, '[^,]+') do
    POSITION[status] = i
    i = i + 1
  end
end
-- KEYS position of status index j (1-based) of 'status'.
local function statusIndex(first, n, status, j)
  local position = POSITION[status]
  if not position then error('no index keys passed for status ' .. status) end
  return KEYS[first + n + position * n + j - 1]
end
local function moveStatus(first, n, runId, from, to, score)
  for j = 1, n do
    if from then redis.call('ZREM', statusIndex(first, n, from, j), runId) end
    redis.call('ZADD', statusIndex(first, n, to, j), score, runId)
  end
end
${PUBLISH_EVENT_LUA}-- Writes the finish time and the duration (returned; nil without a start).
-- ENDED_AT: when the run ended, if the write says so (a final write sent again after Redis lost
-- it: when it was first sent, not now); used only between the record's start and now.
local ENDED_AT = nil
local function endOf(runKey)
  local startedAt = tonumber(redis.call('HGET', runKey, 'startedAt'))
  if ENDED_AT and ENDED_AT <= nowMs and (not startedAt or ENDED_AT >= startedAt) then return ENDED_AT, startedAt end
  return nowMs, startedAt
end
local function finishTimes(runKey)
  local endedAt, startedAt = endOf(runKey)
  redis.call('HSET', runKey, 'finishedAt', endedAt)
  if startedAt then
    redis.call('HSET', runKey, 'durationMs', endedAt - startedAt)
    return endedAt - startedAt
  end
  return nil
end
-- A record moves from 'from' (queued or running) to the final status 'to' at the run's index
-- score: finish time and duration, counted in the timeline and run counters (a skipped or
-- deferred run has no running time), the job's attempt in flight cleared if it is this run.
local function moveToFinal(runKey, runId, from, to, first, n, openKey)
  redis.call('HSET', runKey, 'status', to)
  local score = redis.call('ZSCORE', KEYS[first], runId) or nowMs
  local durationMs = finishTimes(runKey)
  local ranMs = durationMs
  if to == 'skipped' or to == 'deferred' then ranMs = nil end
  -- The Redis clock stepped back (a failover to a host behind): no duration rather than a negative one.
  if ranMs and ranMs < 0 then ranMs = nil end
  countFinal(runKey, to, score, durationMs, ranMs, (endOf(runKey)))
  if redis.call('GET', openKey) == runId then redis.call('DEL', openKey) end
  moveStatus(first, n, runId, from, to, score)
end
-- The reason of a record cancelled by an operator's request (the cancel key's JSON,
-- lib/rebuilds/cancel-request.ts): "cancelled by <actor>: <reason>", or "cancelled by an operator"
-- for a request it cannot read.
local function cancelReasonOf(cancel)
  local ok, request = pcall(cjson.decode, cancel)
  if ok and type(request) == 'table' and type(request.actor) == 'string' and type(request.reason) == 'string' then
    local reason = 'cancelled by ' .. request.actor
    if request.reason ~= '' then reason = reason .. ': ' .. request.reason end
    return reason
  end
  return 'cancelled by an operator'
end
-- Whether a record's worker has stopped beating (its heartbeat key expired on the Redis clock).
local function workerGone(runKey, heartbeatPrefix)
  local workerId = redis.call('HGET', runKey, 'workerId')
  return not workerId or workerId == '' or redis.call('EXISTS', heartbeatPrefix .. workerId) == 0
end
-- The latest time a record's steps name (a start or an end: its worker ran then), or nil.
local function latestStepTime(runKey)
  local raw = redis.call('HGET', runKey, 'steps')
  if not raw or raw == '' then return nil end
  local latest = nil
  local function saw(t)
    t = tonumber(t)
    if t and (not latest or t > latest) then latest = t end
  end
  if string.sub(raw, 1, 1) == '[' then
    local ok, steps = pcall(cjson.decode, raw)
    if ok and type(steps) == 'table' then
      for _, step in ipairs(steps) do
        if type(step) == 'table' then
          saw(step.startedAt)
          saw(step.finishedAt)
        end
      end
    end
    return latest
  end
  local bar = string.find(raw, '|', 1, true)
  local first = bar and tonumber(string.sub(raw, 1, bar - 1))
  if not first then return nil end
  for part in string.gmatch(string.sub(raw, bar + 1), '[^,]+') do
    local offset, duration = string.match(part, ':[rdfa]:(%-?%d+):(%d*)$')
    if offset then
      saw(first + tonumber(offset))
      if duration ~= '' then saw(first + tonumber(offset) + tonumber(duration)) end
    end
  end
  return latest
end
-- The last heartbeat (Redis clock, ms) of a record's worker, from the workers' registry ZSET; nil
-- when not known. A dead worker's attempt ran (at least) until then.
local function lastBeatOf(runKey, registryKey)
  local workerId = redis.call('HGET', runKey, 'workerId')
  if not workerId or workerId == '' then return nil end
  return tonumber(redis.call('ZSCORE', registryKey, workerId))
end
-- Whether a record may name a publish nobody else can know about: its attempt passed the owner
-- check right before its publish ('${PUBLISHING_FIELD}': the fence and build it was about to publish,
-- written by that check, at '${PUBLISHING_FIELD}At' on the Redis clock), its worker still beats,
-- and the check was less than ${PUBLISHING_PROTECTED_MS / 1000} s ago. A pause between the publish and the final
-- record must not have the record called aborted: only that attempt can say how it ended, and it
-- does when it wakes. Once its worker stops beating, or an attempt stuck there that long (a hung
-- disk), the sweep or the next attempt closes it, saying the build may be published.
local function mayHavePublished(runKey, heartbeatPrefix)
  local record = redis.call('HMGET', runKey, '${PUBLISHING_FIELD}', '${PUBLISHING_FIELD}At')
  if not record[1] or record[1] == '' then return false end
  local at = tonumber(record[2])
  if not at or nowMs - at >= ${PUBLISHING_PROTECTED_MS} then return false end
  return not workerGone(runKey, heartbeatPrefix)
end
-- A record's steps (records.ts encodeSteps: packed, or JSON) with each one still running closed
-- as aborted now, written back in their form; returned as a list for the event (nil: none).
local function closeSteps(runKey, at)
  at = at or nowMs
  local raw = redis.call('HGET', runKey, 'steps')
  if not raw or raw == '' then return nil end
  local closed = false
  if string.sub(raw, 1, 1) == '[' then
    local ok, steps = pcall(cjson.decode, raw)
    if not ok or type(steps) ~= 'table' or #steps == 0 then return nil end
    for _, step in ipairs(steps) do
      if type(step) == 'table' and step.status == 'running' then
        step.status = 'aborted'
        step.finishedAt = math.max(at, tonumber(step.startedAt) or at)
        closed = true
      end
    end
    if closed then redis.call('HSET', runKey, 'steps', cjson.encode(steps)) end
    return steps
  end
  local bar = string.find(raw, '|', 1, true)
  local first = bar and tonumber(string.sub(raw, 1, bar - 1))
  if not first then return nil end
  local STATUS = { r = 'running', d = 'done', f = 'failed', a = 'aborted' }
  local parts, steps = {}, {}
  for part in string.gmatch(string.sub(raw, bar + 1), '[^,]+') do
    local name, letter, offset, duration = string.match(part, '^([%w_.%-]+):([rdfa]):(%-?%d+):(%d*)$')
    if not name then return nil end
    local startedAt = first + tonumber(offset)
    if letter == 'r' then
      -- Its start is on its worker's estimate of the Redis clock: never a negative duration.
      if duration == '' then duration = string.format('%d', math.max(0, at - startedAt)) end
      letter = 'a'
      closed = true
    end
    parts[#parts + 1] = name .. ':' .. letter .. ':' .. offset .. ':' .. duration
    local finishedAt = cjson.null
    if duration ~= '' then finishedAt = startedAt + tonumber(duration) end
    steps[#steps + 1] = { name = name, status = STATUS[letter], startedAt = startedAt, finishedAt = finishedAt }
  end
  if #steps == 0 then return nil end
  if closed then redis.call('HSET', runKey, 'steps', string.sub(raw, 1, bar) .. table.concat(parts, ',')) end
  return steps
end
-- The live stream's entry for a record closed by someone else than its attempt (lib/events "run"):
-- aborted, or rebuilt with its build; steps included.
local function closedEvent(runKey, runId, status, steps)
  local f = redis.call('HMGET', runKey, 'rebuild', 'tenant', 'reason', 'finishedAt', 'durationMs', 'fence', 'buildHash')
  local run = { id = runId, rebuild = f[1] or '', status = status, reason = f[3] or '',
    finishedAt = tonumber(f[4]) or cjson.null, tenant = cjson.null }
  if f[2] and f[2] ~= '' then run.tenant = f[2] end
  if tonumber(f[5]) then run.durationMs = tonumber(f[5]) end
  if status == 'rebuilt' then
    run.fence = tonumber(f[6]) or cjson.null
    run.buildHash = f[7] or cjson.null
  end
  if steps then run.steps = steps end
  return cjson.encode({ type = 'run', run = run })
end
-- A record still queued or running moves to aborted; any other is left alone. Returns 1 | 0.
-- One that was about to publish says so in its reason, and whether its worker had stopped
-- beating ('gone': checked by the caller): the build may be published. Its steps still running
-- are closed as aborted, and the live stream (eventsKey) hears of it.
-- 'published' (from the caller: '' or a publish the claims Redis's pointer names the run with and
-- the output's durable fence record does not contradict, as records.ts publishedProof
-- "<fence> <build> <publishedAt>": lib/rebuilds/published-by-run.ts): when it is of the record's own mark, the publish happened and
-- only the final record was lost (refused by a Redis after a failover, or its worker stopped
-- before it could write it): the record ends rebuilt, naming its build and fence, finished when it
-- published (on the claims Redis's clock, when that lies between its start and now). '?': whether
-- it published is not known; a record that was about to publish is left alone (returns 0) until
-- PROOF_PATIENCE_MS after its check before the publish, on the Redis clock. '-': not asked (its
-- worker may be live); a record that was about to publish is left alone.
-- 'lastSeenAt' (nil: not known or not asked): the last heartbeat of the record's worker, which
-- died or stalled (RUN_BEGIN passes it also while that worker still beats: the attempt's job lock
-- lapsed, its pickup is stalled or gone): an aborted record finishes when it was last seen
-- running (that beat, or a later time the record names), not now.
local function abandon(runKey, runId, reason, first, n, gone, eventsKey, published, lastSeenAt)
  local status = redis.call('HGET', runKey, 'status')
  if not status or not ALLOWED[status]['aborted'] then return 0 end
  -- An operator force-released its claim while it ran (its worker paused or dead since): said first.
  local released = redis.call('HGET', runKey, '${FORCE_RELEASED_FIELD}')
  if released and released ~= '' then
    reason = 'an operator force-released its claim (' .. released .. '); ' .. reason
  end
  local score = redis.call('ZSCORE', KEYS[first], runId) or nowMs
  local publishing = redis.call('HGET', runKey, '${PUBLISHING_FIELD}')
  -- Whether it published is not known (the caller's reads went unanswered, or it may not ask): left
  -- to a later sweep until ${PROOF_PATIENCE_MS / 60_000} min after its check before the publish, then closed aborted.
  if published == '?' and publishing and publishing ~= '' then
    local checkedAt = tonumber(redis.call('HGET', runKey, '${PUBLISHING_FIELD}At'))
    if checkedAt and nowMs - checkedAt < ${PROOF_PATIENCE_MS} then return 0 end
  end
  -- Not asked (its worker may be live, writing its own fence record): left to the sweep, which asks
  -- once that worker is gone.
  if published == '-' and publishing and publishing ~= '' then return 0 end
  local closedAs = 'aborted'
  local publishedAt = nil
  if publishing and publishing ~= '' then
    local fence, build = string.match(publishing, '^(%S+) (%S+)$')
    local what = 'publishing build ' .. (build or '?') .. ' (fence ' .. (fence or '?') .. ')'
    local provenFence, provenBuild, provenAt = string.match(published or '', '^(%S+) (%S+) (%d+)$')
    if build and provenFence == fence and provenBuild == build and ALLOWED[status]['rebuilt'] then
      closedAs = 'rebuilt'
      publishedAt = tonumber(provenAt)
      reason = 'published build ' .. build .. ' (fence ' .. fence .. '; the claims Redis recorded this run as its publisher), but ' ..
        'its final record was never written (its worker stopped, or Redis refused or lost the write); ' ..
        'closed when ' .. reason
      redis.call('HSET', runKey, 'fence', fence, 'buildHash', build)
    elseif gone then
      reason = reason .. '; its worker had stopped beating after it passed its check before ' .. what ..
        ': that build may be published'
    else
      reason = reason .. '; it had passed its check before ' .. what ..
        ' and did not end its record: that build may be published'
    end
  end
  -- When someone else closed it (its finish may be earlier: when it was last seen running).
  redis.call('HSET', runKey, 'status', closedAs, 'reason', reason, 'closedAt', nowMs)
  local startedAt = tonumber(redis.call('HGET', runKey, 'startedAt'))
  -- When it was last seen running (set below when its worker's last beat tells), else nil: now.
  local seenUntil = nil
  if closedAs == 'rebuilt' and startedAt and publishedAt and publishedAt >= startedAt and publishedAt <= nowMs then
    -- It ran until it published: that is its finish and its duration.
    redis.call('HSET', runKey, 'finishedAt', publishedAt, 'durationMs', publishedAt - startedAt)
    countFinal(runKey, closedAs, score, publishedAt - startedAt, publishedAt - startedAt, publishedAt)
  elseif closedAs == 'aborted' and lastSeenAt and startedAt and lastSeenAt <= nowMs and startedAt <= nowMs then
    -- Its worker died or stalled after it was last seen (its last heartbeat, its start, a step's
    -- start or end, its check before a publish: the latest): it ran until then at least, not
    -- until this close. Its steps still running are closed then too.
    seenUntil = math.min(nowMs, math.max(lastSeenAt, startedAt, latestStepTime(runKey) or 0,
      tonumber(redis.call('HGET', runKey, '${PUBLISHING_FIELD}At')) or 0))
    redis.call('HSET', runKey, 'finishedAt', seenUntil, 'durationMs', seenUntil - startedAt)
    countFinal(runKey, closedAs, score, seenUntil - startedAt, nil, seenUntil)
  else
    -- Nobody saw it end: counted, but its duration is no run's (it ran until it died or stalled,
    -- or until it published and then ended unseen, when that moment is not known).
    local durationMs = finishTimes(runKey)
    local finishedAt = nowMs
    if closedAs == 'rebuilt' then
      -- No last success claimed either: when it published is not known.
      durationMs, finishedAt = nil, nil
      redis.call('HDEL', runKey, 'durationMs')
    end
    countFinal(runKey, closedAs, score, durationMs, nil, finishedAt)
  end
  moveStatus(first, n, runId, status, closedAs, score)
  local steps = closeSteps(runKey, seenUntil)
  publish(eventsKey, closedEvent(runKey, runId, closedAs, steps))
  return 1
end
`;

export const RUN_BEGIN = typedScript<[code: number, detail: string, stray: string, cancel: string]>()({
  command: "claimwatchRunBegin",
  keys: [
    "run",
    "openAttempt",
    "previousRun",
    "idempotency",
    "pendingTrigger",
    "cancelRequest",
    "events",
    "runCounters",
    "runLog",
    "workerRegistry",
    "rebuiltNow",
  ],
  variadicKeys: true,
  lua: `
--[[ An attempt's first record write, in one round trip; every attempt that starts calls it.
KEYS[1] run HASH (new, or one still in flight that another pickup of this attempt began)
KEYS[2] openAttempt STRING: run id of the job's attempt in flight
KEYS[3] previousRun HASH of the job's previous attempt (may not exist)
KEYS[4] idempotency STRING: run id that rebuilt this (rebuild, tenant, version) (read in mode
  'check': skipped when its mark counts, markOf; with KEYS[11], this build's version)
KEYS[5] pendingTrigger STRING: job id of a waiting trigger
KEYS[6] cancelRequest STRING: an operator's cancel request for the job (read only)
KEYS[7] events STREAM (lib/events): the record's event is written here
KEYS[8] runCounters HASH behind /metrics (lib/metrics/counters)
KEYS[9] runLog LIST of the run: a takeover appends a line saying from whom
KEYS[10] workerRegistry ZSET workerId → last heartbeat: a previous attempt closed here (its job
  lock lapsed: its worker died or stalled) is closed as finished at its worker's last beat
KEYS[11] rebuiltNow HASH of the run's lane, when this begin builds the version of KEYS[4]
  (KEYS[1] again for none): begun running, it is the lane's newest build (laneBegins)
KEYS[12 ..] indexes: ARGV[5] base indexes, then as many per status in ARGV[10]
ARGV[1] runId   ARGV[2] jobId   ARGV[3] previous attempt's run id   ARGV[4] record TTL ms
ARGV[5] n (base indexes)   ARGV[6] mode: 'check' (already rebuilt → skipped, else running),
  'running', or a final status (an attempt that ends where it begins)
ARGV[7] reason prefix of an already-rebuilt skip (the rebuilding run id is appended)
ARGV[8] reason written on the previous attempt if it is still in flight (→ aborted)
ARGV[9] '1': drop the pending-trigger marker if it is still this job's
ARGV[10] statuses with index keys (comma-separated)
ARGV[11] timeline counters of the run's place (JSON, timeline-counters.ts); the previous attempt
  has the same place
ARGV[12] the record's event up to its status: the script appends the status it wrote and '"}}'
  (writer.ts, \`runEventHead\`); '' for none
ARGV[13] worker heartbeat key prefix (keys.workerHeartbeatPrefix): the one key this script names
  itself, from the workerId of a record in flight, to ask whether its worker still beats
ARGV[14] the takeover's log line up to the earlier pickup's name (the caller's time)
ARGV[15..] record field/value pairs, with 'beginId' (unique to the call within its worker,
  'workerId'): a resend of the call finds its own record and answers what it did
A record another call began (the same attempt picked up twice: the queue's Redis lost a pickup)
is taken over while it is in flight only when that call's worker has stopped beating (its
heartbeat expired on the Redis clock, as RUN_ABANDON asks): a pickup whose worker is live is
left alone (exists, detail its status) — it is the job's lock holder or learns soon it is not,
and ends its record itself; the caller defers. Taken over, this begin's
fields and 'beginId' replace the earlier pickup's (whose later writes, naming its own beginId, are
refused: RUN_WRITE, RUN_VERSION): every field of the earlier pickup is dropped (steps, fence,
build, version, the ids its resends would match) but its start and index scores; its
'workerId/beginId' joins 'displacedBegins', so a resend of its begin answers exists instead of
taking the record back; a line naming it is appended to the run's log; then it is begun as the
mode says. A final record is left alone (exists, detail its status).
A final status (begun so, or the previous attempt closed) is counted in the timeline and run
counters. The job's attempt in flight (KEYS[2]) is closed as aborted when it is the previous attempt
(unless it passed its check before a publish and its worker still beats: mayHavePublished; one
that passed that check with its worker gone, or stuck there too long, is returned as a stray: the
caller closes it with the proof of its publish); another earlier one ("stray") is returned for
the caller to close with RUN_ABANDON. A later one
(this attempt lost its job lock before its first write, and the job was picked up again) is left
alone and stays the attempt in flight: records go one way, like takeovers.
A job with a cancel request (KEYS[6]) begins and ends cancelled, whatever the mode (unless the
caller begins it cancelled itself, with its own reason, or rebuilt: a publish that happened): reason "cancelled by <actor>: <reason>"
(lib/rebuilds/cancel-request.ts describeCancel), or "cancelled by an operator" for a request it
cannot read; no duration. It is neither skipped as already rebuilt nor failed.
Attempt numbers are read from run ids (\`<job>-a<attempt>\`, runIdOf).
Returns {code, detail, stray, cancel}: cancel is the job's cancel request ('' for none)
  code ${RUN_REPLY.began} began running | ${RUN_REPLY.alreadyRebuilt} already rebuilt: recorded skipped (detail: the run that rebuilt it) | ${RUN_REPLY.ended} began in a final status (or, for a resend,
     found the record it began final already)
     | ${RUN_REPLY.cancelled} the job has a cancel request: recorded cancelled (detail: the reason written)
     | ${RUN_REPLY.exists} a record with this run id exists, begun by another call, final or in
       flight on a live worker (nothing written; detail: its status)
]]
${COMMON}
local runId, jobId, previousId = ARGV[1], ARGV[2], ARGV[3]
local n, mode = tonumber(ARGV[5]), ARGV[6]
local FIRST = 12
local FIELDS = 15
setStatuses(ARGV[10])
setTimeline(ARGV[11], KEYS[8])
if ARGV[9] == '1' and redis.call('GET', KEYS[5]) == jobId then redis.call('DEL', KEYS[5]) end
local cancel = redis.call('GET', KEYS[6]) or ''
-- The status of a record in flight that another pickup of this attempt began, taken over.
local takenOver = false
if redis.call('EXISTS', KEYS[1]) == 1 then
  -- A resend of this very call (its reply lost to a reconnect) answers what it did; a record
  -- another call began (the same attempt picked up twice) is taken over while in flight, and
  -- answers exists once final.
  local beginId, workerId = false, false
  for i = FIELDS, #ARGV - 1, 2 do
    if ARGV[i] == 'beginId' then beginId = ARGV[i + 1] elseif ARGV[i] == 'workerId' then workerId = ARGV[i + 1] end
  end
  local stored = redis.call('HMGET', KEYS[1], 'beginId', 'workerId', 'status', 'reason')
  if beginId and stored[1] == beginId and stored[2] == workerId then
    local was, reason = stored[3], stored[4] or ''
    if was == 'skipped' and string.sub(reason, 1, #ARGV[7]) == ARGV[7] then
      return {${RUN_REPLY.alreadyRebuilt}, string.sub(reason, #ARGV[7] + 1), '', cancel}
    end
    if was == 'cancelled' and mode ~= 'cancelled' then return {${RUN_REPLY.cancelled}, reason, '', cancel} end
    if FINAL[was] then return {${RUN_REPLY.ended}, '', '', cancel} end
    return {${RUN_REPLY.began}, '', '', cancel}
  end
  if not stored[3] or FINAL[stored[3]] then return {${RUN_REPLY.exists}, stored[3] or '', '', cancel} end
  -- A begin this record was taken over from, sent again (its reply lost): not taken back.
  local displaced = redis.call('HGET', KEYS[1], 'displacedBegins') or ''
  if beginId and string.find(',' .. displaced .. ',', ',' .. (workerId or '') .. '/' .. beginId .. ',', 1, true) then
    return {${RUN_REPLY.exists}, stored[3], '', cancel}
  end
  -- Its pickup's worker still beats: not taken (it ends the record itself).
  if stored[2] and stored[2] ~= '' and redis.call('EXISTS', ARGV[13] .. stored[2]) == 1 then
    return {${RUN_REPLY.exists}, stored[3], '', cancel}
  end
  -- Nor one that passed its check before a publish: it may have published, which a takeover
  -- (every field dropped) would hide; the sweep closes it saying so, and the job's next pickup
  -- is a new attempt.
  local marked = redis.call('HGET', KEYS[1], '${PUBLISHING_FIELD}')
  if marked and marked ~= '' then return {${RUN_REPLY.exists}, stored[3], '', cancel} end
  takenOver = stored[3]
  -- Nothing of the earlier pickup's stays (steps, fence, build, version and the ids of its
  -- calls, whose resends would otherwise find their own): only its start, and its begin's name.
  local startedAt = redis.call('HGET', KEYS[1], 'startedAt')
  local released = redis.call('HGET', KEYS[1], '${FORCE_RELEASED_FIELD}')
  local why = ' (its worker stopped beating)'
  if released and released ~= '' then why = why .. '; an operator had force-released its claim (' .. released .. ')' end
  if displaced ~= '' then displaced = displaced .. ',' end
  displaced = displaced .. (stored[2] or '') .. '/' .. (stored[1] or '')
  redis.call('DEL', KEYS[1])
  redis.call('HSET', KEYS[1], 'displacedBegins', displaced)
  if startedAt then redis.call('HSET', KEYS[1], 'startedAt', startedAt) end
  appendLog(KEYS[9], {ARGV[14] .. (stored[2] or '?') .. why}, 1, 1)
  redis.call('PEXPIRE', KEYS[9], ARGV[4])
end
local stray = ''
local open = redis.call('GET', KEYS[2])
local function attemptOf(id) return tonumber(string.match(id, '%-a(%d+)$')) or 0 end
-- A later attempt is in flight: this one neither closes it nor takes its place as the job's
-- attempt in flight.
local laterOpen = open and attemptOf(runId) > 0 and attemptOf(open) > attemptOf(runId)
if open and open ~= runId and not laterOpen then
  if open == previousId then
    -- Left running while it may have published and its worker beats: it ends its record itself.
    if not mayHavePublished(KEYS[3], ARGV[13]) then
      -- One that was about to publish is the caller's to close, with the proof of its publish
      -- (lib/rebuilds/published-by-run.ts): returned as a stray.
      local marked = redis.call('HGET', KEYS[3], '${PUBLISHING_FIELD}')
      if marked and marked ~= '' then
        stray = open
      else
        abandon(KEYS[3], previousId, ARGV[8], FIRST, n, workerGone(KEYS[3], ARGV[13]), KEYS[7], '', lastBeatOf(KEYS[3], KEYS[10]))
      end
    end
  else
    stray = open
  end
end
local by = false
local status = mode
local cancelReason = false
-- A 'rebuilt' begin records a publish that happened (its record was lost): no cancel undoes it.
if cancel ~= '' and mode ~= 'cancelled' and mode ~= 'rebuilt' then
  status = 'cancelled'
  cancelReason = cancelReasonOf(cancel)
elseif mode == 'check' then
  local marked, counts = markOf(KEYS[4], KEYS[11], KEYS[1])
  if marked and counts then
    by = marked
    status = 'skipped'
  else
    status = 'running'
  end
end
-- One HSET: the caller's fields, then what the script knows (status, times, reason).
local fields = {}
for i = FIELDS, #ARGV do fields[#fields + 1] = ARGV[i] end
local startedAt = nowMs
-- A record taken over keeps its start (and its place in the indexes).
if takenOver then startedAt = tonumber(redis.call('HGET', KEYS[1], 'startedAt')) or nowMs end
local score = nowMs
if takenOver then score = tonumber(redis.call('ZSCORE', KEYS[FIRST], runId)) or nowMs end
-- The job's creation time is the clock of the process that added it; one ahead of Redis's would
-- make a run start before it was created: never later than the start (times here are Redis's).
for i = 1, #fields - 1, 2 do
  if fields[i] == 'createdAt' and (tonumber(fields[i + 1]) or 0) > startedAt then fields[i + 1] = startedAt end
end
local extra = {'id', runId, 'status', status, 'startedAt', startedAt}
if FINAL[status] then
  extra[#extra + 1] = 'finishedAt'
  extra[#extra + 1] = nowMs
  extra[#extra + 1] = 'durationMs'
  extra[#extra + 1] = 0
end
if by then
  extra[#extra + 1] = 'reason'
  extra[#extra + 1] = ARGV[7] .. by
end
if cancelReason then
  extra[#extra + 1] = 'reason'
  extra[#extra + 1] = cancelReason
end
for i = 1, #extra do fields[#fields + 1] = extra[i] end
redis.call('HSET', KEYS[1], unpack(fields))
if status == 'running' and KEYS[11] ~= KEYS[1] then laneBegins(KEYS[11], KEYS[4], ARGV[4]) end
if laterOpen then
  -- KEYS[2] keeps naming the later attempt.
elseif FINAL[status] then
  if stray == '' and open then redis.call('DEL', KEYS[2]) end
else
  redis.call('SET', KEYS[2], runId, 'PX', ARGV[4])
end
redis.call('PEXPIRE', KEYS[1], ARGV[4])
for j = 1, n do redis.call('ZADD', KEYS[FIRST + j - 1], score, runId) end
moveStatus(FIRST, n, runId, takenOver, status, score)
-- An attempt that ends where it begins did not run: no duration for the run counters.
if FINAL[status] then countFinal(KEYS[1], status, score, 0, nil, nowMs) end
if ARGV[12] ~= '' then publish(KEYS[7], ARGV[12] .. status .. '"}}') end
local code = ${RUN_REPLY.began}
if by then
  code = ${RUN_REPLY.alreadyRebuilt}
elseif cancelReason then
  code = ${RUN_REPLY.cancelled}
elseif FINAL[status] then
  code = ${RUN_REPLY.ended}
end
return {code, by or cancelReason or '', stray, cancel}
`,
});

export const RUN_WRITE = typedScript<[code: number, cancel: string]>()({
  command: "claimwatchRunWrite",
  keys: ["run", "runLog", "openAttempt", "idempotency", "events", "runCounters", "cancelRequest", "rebuiltNow"],
  variadicKeys: true,
  lua: `
--[[ Every later write of an attempt's record: fields, log lines, a status move, and with the
final record the idempotency key — checked against the record's current status.
KEYS[1] run HASH   KEYS[2] runLog LIST   KEYS[3] openAttempt STRING   KEYS[4] idempotency STRING
KEYS[5] events STREAM (lib/events): the write's events go here, with it
KEYS[6] runCounters HASH behind /metrics (lib/metrics/counters)
KEYS[7] cancelRequest STRING: the job's operator cancel request (read only: returned, so the
  owner check before a publish also looks for a cancel in the same round trip)
KEYS[8] rebuiltNow HASH of the run's lane (its output) (with 'set' or 'fence' only; KEYS[1]
  again otherwise): the mark follows its rules (lanePublished; 'fence': laneFenceSeen)
KEYS[9 ..] indexes (status moves only): ARGV[3] base indexes, then as many per status in ARGV[9]
ARGV[1] runId   ARGV[2] record TTL ms   ARGV[3] n   ARGV[4] new status, '' for fields only
ARGV[5] idempotency: 'set' (to runId, PX ARGV[6]) | 'set-held:<ms>' (the same, written while the
  publish's claim is held until <ms> on this server's clock: applied before then, the lane's
  newest publish, so the mark counts in this incarnation: COMMON)
  | 'del' (only if it names this runId: another
  run's key stays) | 'fence' (the fence recorded in the lane, another version's mark dropped, its
  own version not marked: a final write sent again after Redis lost it, when the output may serve
  a newer publish the lane no longer knows) | ''   ARGV[6] idempotency TTL ms
ARGV[7] with 'set' or 'fence': the fence the run published with ('' unknown: with 'set' the key is
  set as it is, with 'fence' nothing)
ARGV[8] L: log lines that follow   ARGV[9] statuses with index keys
ARGV[10] timeline counters of the run's place (JSON, timeline-counters.ts; '' without a status move)
ARGV[11] the record's event (JSON, written when the record is written; '' for none)
ARGV[12] the log's event (JSON, written when lines are appended; '' for none)
ARGV[13] owner: the writer's beginId ('' for a write on behalf of the job, e.g. an operator's
  cancel): a record begun by another call (the same attempt picked up twice) is not written
ARGV[14 .. 13+L] log lines   ARGV[14+L ..] record field/value pairs
A move into a final status is counted in the timeline and run counters (at the run's index
score; a run's duration unless it was skipped or deferred).
The idempotency change is made whatever the record says (it is about the output, not the
record); log lines are appended to any record that exists (a repeat of the same write adds none).
A record field 'writeId' names the write: a final write whose record is final already with
that same writeId is a repeat of it (applied, then asked again) and writes nothing.
Returns {code, cancel}: cancel is the job's cancel request ('' for none)
  code ${RUN_REPLY.written} written, or a repeat of a write applied already (nothing written again)
  | ${RUN_REPLY.missing} missing (trimmed or expired: nothing written)
  | ${RUN_REPLY.notOwner} the record was begun by another call than ARGV[13] (nothing written but the idempotency change)
  | ${RUN_REPLY.final} the record is final already (fields and status unchanged)
  | ${RUN_REPLY.refused} the move is not in RUN_TRANSITIONS (nothing written)
]]
${COMMON}
local runId, n, to = ARGV[1], tonumber(ARGV[3]), ARGV[4]
local FIRST = 9
setStatuses(ARGV[9])
-- Read only, never in the way of the record's write: a key of another type reads as none.
local cancel = redis.pcall('GET', KEYS[7])
if type(cancel) ~= 'string' then cancel = '' end
setTimeline(ARGV[10], KEYS[6])
local heldUntil = tonumber(string.match(ARGV[5], '^set%-held:(%d+)$'))
-- Any other 'set-held…' value is a plain 'set': never held.
if ARGV[5] == 'set' or string.sub(ARGV[5], 1, 8) == 'set-held' then
  local fence = tonumber(ARGV[7])
  if fence and KEYS[8] ~= KEYS[1] then
    -- Its claim held still when this write is applied, not only when it was sent (a holder paused
    -- in between may have lost it to another publish: review helper-144).
    lanePublished(KEYS[8], KEYS[4], runId, fence, ARGV[6], false, heldUntil ~= nil and nowMs < heldUntil)
  else
    redis.call('SET', KEYS[4], runId, 'PX', ARGV[6])
  end
elseif ARGV[5] == 'fence' then
  local fence = tonumber(ARGV[7])
  if fence and KEYS[8] ~= KEYS[1] then laneFenceSeen(KEYS[8], KEYS[4], fence, ARGV[6]) end
elseif ARGV[5] == 'del' and redis.call('GET', KEYS[4]) == runId then
  redis.call('DEL', KEYS[4])
end
local current = redis.call('HGET', KEYS[1], 'status')
if not current then return {${RUN_REPLY.missing}, cancel} end
if ARGV[13] ~= '' then
  local owner = redis.call('HGET', KEYS[1], 'beginId')
  if owner and owner ~= ARGV[13] then return {${RUN_REPLY.notOwner}, cancel} end
end
local lines = tonumber(ARGV[8])
-- A repeat of this very write, applied already (a retried call, a command resent after a
-- reconnect): the record holds its writeId. Nothing is written again, not even its log lines.
if FINAL[current] and current == to then
  for i = 14 + lines, #ARGV - 1, 2 do
    if ARGV[i] == 'writeId' then
      if redis.call('HGET', KEYS[1], 'writeId') == ARGV[i + 1] then return {${RUN_REPLY.written}, cancel} end
      break
    end
  end
end
if lines > 0 then
  appendLog(KEYS[2], ARGV, 14, 13 + lines)
  -- A final record's log never outlives it (one trimming keeps for a late pickup expires in an hour).
  local logTtl = tonumber(ARGV[2])
  if FINAL[current] then
    local left = redis.call('PTTL', KEYS[1])
    if left > 0 and left < logTtl then logTtl = left end
  end
  redis.call('PEXPIRE', KEYS[2], logTtl)
end
if FINAL[current] then return {${RUN_REPLY.final}, cancel} end
if to ~= '' and not ALLOWED[current][to] then return {${RUN_REPLY.refused}, cancel} end
if #ARGV >= 14 + lines then
  redis.call('HSET', KEYS[1], unpack(ARGV, 14 + lines))
  -- The check before a publish (mayHavePublished) is timed on the Redis clock; a final write that
  -- names its finishedAt (sent again after Redis lost it) ended then (finishTimes).
  for i = 14 + lines, #ARGV - 1, 2 do
    if ARGV[i] == '${PUBLISHING_FIELD}' then redis.call('HSET', KEYS[1], '${PUBLISHING_FIELD}At', nowMs) end
    if ARGV[i] == 'finishedAt' then ENDED_AT = tonumber(ARGV[i + 1]) end
  end
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
if to ~= '' and to ~= current then
  if FINAL[to] then
    moveToFinal(KEYS[1], runId, current, to, FIRST, n, KEYS[3])
  else
    redis.call('HSET', KEYS[1], 'status', to)
    moveStatus(FIRST, n, runId, current, to, redis.call('ZSCORE', KEYS[FIRST], runId) or nowMs)
  end
end
publish(KEYS[5], ARGV[11])
if lines > 0 then publish(KEYS[5], ARGV[12]) end
return {${RUN_REPLY.written}, cancel}
`,
});

export const RUN_VERSION = typedScript<[code: number, detail: string, cancel: string]>()({
  command: "claimwatchRunVersion",
  keys: ["run", "openAttempt", "idempotency", "cancelRequest", "events", "runCounters", "rebuiltNow"],
  variadicKeys: true,
  lua: `
--[[ The version of an attempt whose record began running before it was known (its inputs took
long to read, lib/rebuilds/run-rebuild.ts): RUN_BEGIN's check, made late, on the running record.
KEYS[1] run HASH   KEYS[2] openAttempt STRING of its job
KEYS[3] idempotency STRING: run id that rebuilt this (rebuild, tenant, version)
KEYS[4] cancelRequest STRING: an operator's cancel request for the job (read only)
KEYS[5] events STREAM (lib/events)   KEYS[6] runCounters HASH behind /metrics
KEYS[7] rebuiltNow HASH of the run's lane (KEYS[1] again for none): still running with its
  version (KEYS[3]'s), it is the lane's newest build (laneBegins)
KEYS[8 ..] indexes: ARGV[3] base indexes, then as many per status in ARGV[6]
ARGV[1] runId   ARGV[2] record TTL ms   ARGV[3] n   ARGV[4] '1': check the idempotency key
ARGV[5] reason prefix of an already-rebuilt skip (the rebuilding run id is appended)
ARGV[6] statuses with index keys (comma-separated)   ARGV[7] timeline counters (JSON)
ARGV[8] the record's event up to its status (the script appends the status and '"}}'); '' for none
ARGV[9] versionId: names this call (stored as the record's 'versionId'), so a resend of it (after
  a reconnect) answers what it did instead of what the record says now
ARGV[10] owner: the beginId of the call that began the record ('' for no check): a running record
  another call began or took over (the same attempt picked up again, RUN_BEGIN) is not this
  pickup's any more, and is not written
ARGV[11..] record field/value pairs (the version and its idempotency key hash)
Only a running record is written: with a cancel request it ends cancelled (as RUN_BEGIN would),
else with the idempotency key set and counting (markOf) it ends skipped (already rebuilt), else it
gains the fields.
Returns {code, detail, cancel}: cancel is the job's cancel request ('' for none)
  code ${RUN_REPLY.began} running, fields written | ${RUN_REPLY.alreadyRebuilt} recorded skipped (detail: the run that rebuilt it)
     | ${RUN_REPLY.cancelled} recorded cancelled (detail: the reason)
     | ${RUN_REPLY.final} the record is final already, ended by someone else (detail: its status)
     | ${RUN_REPLY.refused} the record is not running (detail: its status) | ${RUN_REPLY.missing} no record
     | ${RUN_REPLY.notOwner} the running record was begun or taken over by another call (detail: its status)
]]
${COMMON}
local runId, n = ARGV[1], tonumber(ARGV[3])
local FIRST = 8
setStatuses(ARGV[6])
setTimeline(ARGV[7], KEYS[6])
local current = redis.call('HGET', KEYS[1], 'status')
local cancel = redis.call('GET', KEYS[4]) or ''
if not current then return {${RUN_REPLY.missing}, '', cancel} end
if redis.call('HGET', KEYS[1], 'versionId') == ARGV[9] then
  -- A resend of this call, applied already: what it did.
  local reason = redis.call('HGET', KEYS[1], 'reason') or ''
  if current == 'running' then return {${RUN_REPLY.began}, '', cancel} end
  if current == 'skipped' then return {${RUN_REPLY.alreadyRebuilt}, string.sub(reason, #ARGV[5] + 1), cancel} end
  if current == 'cancelled' then return {${RUN_REPLY.cancelled}, reason, cancel} end
  return {${RUN_REPLY.final}, current, cancel}
end
if FINAL[current] then return {${RUN_REPLY.final}, current, cancel} end
if current ~= 'running' then return {${RUN_REPLY.refused}, current, cancel} end
if ARGV[10] ~= '' then
  local owner = redis.call('HGET', KEYS[1], 'beginId')
  if owner and owner ~= ARGV[10] then return {${RUN_REPLY.notOwner}, current, cancel} end
end
local status, reason, by = 'running', false, false
if cancel ~= '' then
  status = 'cancelled'
  reason = cancelReasonOf(cancel)
elseif ARGV[4] == '1' then
  local marked, counts = markOf(KEYS[3], KEYS[7], KEYS[1])
  if marked and counts then
    by = marked
    status = 'skipped'
    reason = ARGV[5] .. by
  end
end
local fields = {'versionId', ARGV[9]}
for i = 11, #ARGV do fields[#fields + 1] = ARGV[i] end
if reason then
  fields[#fields + 1] = 'reason'
  fields[#fields + 1] = reason
end
redis.call('HSET', KEYS[1], unpack(fields))
redis.call('PEXPIRE', KEYS[1], ARGV[2])
if status ~= 'running' then moveToFinal(KEYS[1], runId, 'running', status, FIRST, n, KEYS[2]) end
if status == 'running' and KEYS[7] ~= KEYS[1] then laneBegins(KEYS[7], KEYS[3], ARGV[2]) end
if ARGV[8] ~= '' then publish(KEYS[5], ARGV[8] .. status .. '"}}') end
if by then return {${RUN_REPLY.alreadyRebuilt}, by, cancel} end
if reason then return {${RUN_REPLY.cancelled}, reason, cancel} end
return {${RUN_REPLY.began}, '', cancel}
`,
});

export const RUN_ABANDON = typedScript<number>()({
  command: "claimwatchRunAbandon",
  keys: [
    "run",
    "openAttempt",
    "workerHeartbeat",
    "runCounters",
    "sweeperHeartbeat",
    "events",
    "workerRegistry",
    "idempotency",
    "rebuiltNow",
  ],
  variadicKeys: true,
  lua: `
--[[ Close an attempt nobody will finish: queued or running → aborted (or rebuilt: ARGV[11]),
atomically (its steps still running closed too, and the live stream told). Closed rebuilt, its
fence is recorded in its lane and another version's mark dropped (laneFenceSeen), but its own
version is not marked: the proof was read from the claims Redis before this write, and a publish
of another version since (its final write not landed yet) is in no lane field, so a mark here
could skip a request the output no longer serves (review helper-118). A build not needed, at most.
KEYS[1] run HASH   KEYS[2] openAttempt STRING of its job   KEYS[3] workerHeartbeat HASH of the
worker the caller saw on the record   KEYS[4] runCounters HASH behind /metrics (lib/metrics/counters)
KEYS[5] workerHeartbeat HASH of the sweeping worker (with ARGV[9])
KEYS[6] events STREAM (lib/events): the record's event is written here
KEYS[7] workerRegistry ZSET workerId → last heartbeat: a record whose worker is gone is closed as
  finished at its last beat (it ran until then, not until this close)
KEYS[8] idempotency STRING of the run's version (KEYS[1] again for none): its own mark stays
KEYS[9] rebuiltNow HASH of the run's lane (KEYS[1] again for none): with a proven close
KEYS[10 ..] indexes: ARGV[2] base indexes, then as many per status in ARGV[5]
ARGV[1] runId   ARGV[2] n   ARGV[3] reason
ARGV[4] workerId the caller saw: '' closes it whatever its worker; otherwise only if the record
  still names that worker and the worker's heartbeat has expired (on the Redis clock)
ARGV[5] statuses with index keys (comma-separated)
ARGV[6] timeline counters of the run's place (JSON, timeline-counters.ts): an abort is counted
ARGV[7] '1': the caller is that worker (it no longer runs the record's job): its heartbeat is
  not asked, the record must still name it
ARGV[8] worker heartbeat key prefix (keys.workerHeartbeatPrefix): with ARGV[4] '', a record that
  passed its check before a publish is left alone while its worker beats (mayHavePublished)
ARGV[9] with ARGV[4] another worker's: the sweeper (KEYS[5]) judges it dead only if its own beat
  streak has held this long (ms) and its last beat is at most ARGV[10] ms old (WORKER_BEAT's
  beatStreakSince; BEAT_STREAK in lib/workers/heartbeat.ts): after a write outage every heartbeat
  expired, live or not, and a sweep resent after one finds its beat old. '' asks nothing (a
  caller that is no worker)
ARGV[11] what this run published (records.ts proofArg: a publishedProof "<fence> <build>
  <publishedAt>", '?' not known, '-' not asked, '' unproven; lib/rebuilds/published-by-run.ts): a
  record whose mark it proves ends rebuilt; with '?' one that was about to publish is left alone
  until PROOF_PATIENCE_MS after its check, with '-' whatever its age (abandon)
ARGV[12] idempotency TTL ms of a proven close ('' for none): how long the lane lives at least;
  below the lane's newest recorded fence, nothing
Returns ${RUN_REPLY.written} aborted (or rebuilt, ARGV[11]) | ${RUN_REPLY.no} left alone (final, or its worker is live or changed, or the sweeper's streak too short or its last beat too old) | ${RUN_REPLY.missing} missing
]]
${COMMON}
setStatuses(ARGV[5])
setTimeline(ARGV[6], KEYS[4])
if redis.call('EXISTS', KEYS[1]) == 0 then return ${RUN_REPLY.missing} end
if ARGV[4] ~= '' then
  if redis.call('HGET', KEYS[1], 'workerId') ~= ARGV[4] then return ${RUN_REPLY.no} end
  if ARGV[7] ~= '1' then
    if redis.call('EXISTS', KEYS[3]) == 1 then return ${RUN_REPLY.no} end
    if ARGV[9] ~= '' then
      local sweeper = redis.call('HMGET', KEYS[5], 'heartbeatAt', 'beatStreakSince')
      local at, since = tonumber(sweeper[1]), tonumber(sweeper[2])
      if not at or not since or nowMs - at > tonumber(ARGV[10]) or nowMs - since < tonumber(ARGV[9]) then
        return ${RUN_REPLY.no}
      end
    end
  end
elseif mayHavePublished(KEYS[1], ARGV[8]) then
  return ${RUN_REPLY.no}
end
-- Gone: its heartbeat was found expired above, or (closing whatever its worker) is now.
local gone = ARGV[7] ~= '1' and (ARGV[4] ~= '' or workerGone(KEYS[1], ARGV[8]))
local closed = abandon(KEYS[1], ARGV[1], ARGV[3], 10, tonumber(ARGV[2]), gone, KEYS[6], ARGV[11], gone and lastBeatOf(KEYS[1], KEYS[7]) or nil)
if closed == 1 and redis.call('GET', KEYS[2]) == ARGV[1] then redis.call('DEL', KEYS[2]) end
if closed == 1 and ARGV[12] ~= '' and KEYS[9] ~= KEYS[1] and redis.call('HGET', KEYS[1], 'status') == 'rebuilt' then
  local fence = tonumber(redis.call('HGET', KEYS[1], 'fence'))
  if fence then laneFenceSeen(KEYS[9], KEYS[8], fence, ARGV[12]) end
end
if closed == 1 then return ${RUN_REPLY.written} end
return ${RUN_REPLY.no}
`,
});

export const RUN_TRIM = typedScript<number>()({
  command: "claimwatchRunTrim",
  keys: ["run", "runLog"],
  variadicKeys: true,
  lua: `
--[[ Delete one run record, its log and its index entries — unless it is still in flight.
KEYS[1] run HASH   KEYS[2] runLog LIST
KEYS[3 ..] indexes: ARGV[2] base indexes, then as many per status in ARGV[3] (every status)
ARGV[1] runId   ARGV[2] n   ARGV[3] statuses with index keys (comma-separated)
ARGV[4] ms an aborted record is kept after it finished (0: none)
A record is removed from its base indexes and its status's; one whose hash already expired
from every index (its status is unknown). The timeline counters are left as they are: they count
what finished, not what is kept (timeline-counters.ts).
An aborted record's hash stays ARGV[4] ms after it finished (on the Redis clock): the sweep or
the job's next attempt closed it while its pickup may still run (paused). That pickup's owner
check before its publish must find it final; a record gone would read as lost in a Redis crash,
and the pickup would publish and write it again. The hour runs from its end or its close, the later
(at most an hour from now). It leaves the indexes now all the same, marked '${UNLISTED_FIELD}' so
its job's attempts (looked up by id) leave it out too; its hash and log expire when the hour is up.
Kept listed, an old abort outlived the newer runs trimmed in its place and became the rebuild's
"last run" (black-box helper-123).
Returns ${RUN_REPLY.written} deleted (or unlisted) | ${RUN_REPLY.no} kept: queued or running
]]
${COMMON}
local status = redis.call('HGET', KEYS[1], 'status')
if status and not FINAL[status] then return ${RUN_REPLY.no} end
local keptFor = 0
if status == 'aborted' then
  -- From its end, or from when someone else closed it (a sweep late after an outage closes a
  -- record whose last sign of life is old: its pickup may wake any time after).
  local endedAt = math.max(tonumber(redis.call('HGET', KEYS[1], 'finishedAt')) or 0,
    tonumber(redis.call('HGET', KEYS[1], 'closedAt')) or 0)
  -- At most the window from now (an end in the future: a Redis clock that stepped back).
  if endedAt > 0 then keptFor = math.min(endedAt + tonumber(ARGV[4]) - nowMs, tonumber(ARGV[4])) end
end
if keptFor > 0 then
  -- Unlisted, but found by its id (its job's attempts): marked so that listing leaves it out too.
  redis.call('HSET', KEYS[1], '${UNLISTED_FIELD}', nowMs)
  for i = 1, 2 do
    local ttl = redis.call('PTTL', KEYS[i])
    if ttl == -1 or ttl > keptFor then redis.call('PEXPIRE', KEYS[i], keptFor) end
  end
else
  redis.call('DEL', KEYS[1], KEYS[2])
end
local n = tonumber(ARGV[2])
setStatuses(ARGV[3])
if status and POSITION[status] then
  for j = 1, n do
    redis.call('ZREM', KEYS[2 + j], ARGV[1])
    redis.call('ZREM', statusIndex(3, n, status, j), ARGV[1])
  end
else
  for i = 3, #KEYS do redis.call('ZREM', KEYS[i], ARGV[1]) end
end
return ${RUN_REPLY.written}
`,
});

export const RUN_NOTE_MADE_CURRENT = typedScript<number>()({
  command: "claimwatchRunNoteMadeCurrent",
  keys: ["run", "runLog", "events", "idempotency", "rebuiltNow"],
  lua: `
--[[ A record that ended without a publish of its own (failed: its fence record refused by a full
disk) whose build repair has since made current: the record says so, its status unchanged (a final
status never changes), and the version counts as rebuilt by it.
KEYS[1] run HASH   KEYS[2] runLog LIST   KEYS[3] events STREAM (lib/events)
KEYS[4] idempotency STRING of the run's version (KEYS[1] again for none)
KEYS[5] rebuiltNow HASH of the run's lane (KEYS[1] again for none): the mark follows its rules,
  as RUN_WRITE's (lanePublished)
ARGV[1] "<fence> <build hash>"   ARGV[2] the log line   ARGV[3] runId
ARGV[4] idempotency TTL ms ('' for none): the key is set to the run only if no run holds it
Returns ${RUN_REPLY.written} noted | ${RUN_REPLY.no} not noted (rebuilt, in flight, or noted already) | ${RUN_REPLY.missing} missing
]]
${COMMON}
local status = redis.call('HGET', KEYS[1], 'status')
if not status then return ${RUN_REPLY.missing} end
if not FINAL[status] or status == 'rebuilt' then return ${RUN_REPLY.no} end
if redis.call('HEXISTS', KEYS[1], '${MADE_CURRENT_LATER_FIELD}') == 1 then return ${RUN_REPLY.no} end
redis.call('HSET', KEYS[1], '${MADE_CURRENT_LATER_FIELD}', ARGV[1] .. ' ' .. string.format('%.0f', nowMs))
appendLog(KEYS[2], {ARGV[2]}, 1, 1)
-- The log lives as long as the record (a log made here would otherwise never expire).
local ttl = redis.call('PTTL', KEYS[1])
if ttl > 0 then redis.call('PEXPIRE', KEYS[2], ttl) end
local fence, build = string.match(ARGV[1], '^(%d+) (%S+)$')
if ARGV[4] ~= '' and KEYS[4] ~= KEYS[1] then
  if KEYS[5] ~= KEYS[1] then
    lanePublished(KEYS[5], KEYS[4], ARGV[3], tonumber(fence), ARGV[4], true)
  else
    redis.call('SET', KEYS[4], ARGV[3], 'PX', ARGV[4], 'NX')
  end
end
local f = redis.call('HMGET', KEYS[1], 'rebuild', 'tenant')
local run = { id = ARGV[3], rebuild = f[1] or '', tenant = cjson.null, status = status }
if f[2] and f[2] ~= '' then run.tenant = f[2] end
run.madeCurrentLater = { fence = tonumber(fence), buildHash = build, at = nowMs }
publish(KEYS[3], cjson.encode({ type = 'run', run = run }))
return ${RUN_REPLY.written}
`,
});

export const RUN_MARK_CONFIRMED = typedScript<number>()({
  command: "claimwatchRunMarkConfirmed",
  keys: ["idempotency", "rebuiltNow"],
  lua: `
--[[ A mark that did not count (markOf: another incarnation), confirmed under the held claim by the
claims Redis's pointer and the output's fence record (lib/rebuilds/rebuilt-by-now.ts): made to
count again, so the next request skips at once instead of taking the claim (review helper-144).
Only while the key still names that run, the lane still marks it, no build of another version
began since, and the lane's fence is not past the confirmed one.
KEYS[1] idempotency STRING   KEYS[2] rebuiltNow HASH of its lane
ARGV[1] the run the mark names   ARGV[2] the fence the pointer published it with
ARGV[3] until when (ms, this server's clock) the confirming attempt holds its claim: applied later,
  nothing (the claim may be another's, who published since: review helper-145)
Returns 1 made to count | 0 left as it is
]]
${COMMON}
if not tonumber(ARGV[3]) or nowMs >= tonumber(ARGV[3]) then return 0 end
laneHash(KEYS[2])
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
local lane = redis.call('HMGET', KEYS[2], 'key', 'building', 'fence')
local fence = tonumber(ARGV[2])
if lane[1] ~= KEYS[1] or (lane[2] and lane[2] ~= KEYS[1]) then return 0 end
if not fence or (lane[3] and tonumber(lane[3]) > fence) then return 0 end
redis.call('HSET', KEYS[2], 'fence', fence, 'fenceIn', incarnation(), 'markedIn', incarnation())
return 1
`,
});

export const READ_REBUILT_MARK = typedScript<[by: string, counts: number, alongside: string]>()({
  command: "claimwatchReadRebuiltMark",
  keys: ["idempotency", "rebuiltNow", "alongside"],
  lua: `
--[[ Read only: the run that rebuilt a (rebuild, tenant, version), and whether its mark counts for
a skip here (markOf: made in this Redis's incarnation by the lane's newest publish).
KEYS[1] idempotency STRING   KEYS[2] rebuiltNow HASH of its lane (KEYS[1] again for none)
KEYS[3] a STRING read in the same round trip (KEYS[1] again for none)
ARGV[1] none (no arguments)
Returns {by, counts, alongside}: by '' for no mark; counts 1 or 0; alongside KEYS[3]'s value, '' for none
]]
${REBUILT_MARK_LUA}
local by, counts = markOf(KEYS[1], KEYS[2], KEYS[1])
local alongside = ''
if KEYS[3] ~= KEYS[1] then alongside = redis.call('GET', KEYS[3]) or '' end
return {by or '', counts and 1 or 0, alongside}
`,
});

export const RUN_SCRIPTS: readonly LuaScript[] = [
  READ_REBUILT_MARK,
  RUN_MARK_CONFIRMED,
  RUN_BEGIN,
  RUN_WRITE,
  RUN_VERSION,
  RUN_ABANDON,
  RUN_TRIM,
  RUN_NOTE_MADE_CURRENT,
  TIMELINE_COUNT_RECORD,
  TIMELINE_BACKFILL_CURSOR,
];
