/**
 * Every Lua script claimwatch runs, as typed constants registered with ioredis `defineCommand`
 * (EVALSHA, with EVAL when the server answers NOSCRIPT, e.g. after a restart).
 *
 * Each script's header lists KEYS, ARGV and return codes; `keys` in the TS constant repeats the
 * KEYS order so callers pass an arity-checked tuple. Return codes are `REPLY` (replies.ts),
 * interpolated into the Lua: positive = done, 0 = an expected "no" that is not a failure (e.g.
 * held), REPLY.missing (-2) = missing, REPLY.notOwner (-6) = not the owner. Times inside scripts come from Redis `TIME`, so every timestamp a claim
 * carries is on one clock (the claims server's), whatever the clocks of the hosts calling it.
 * Scripts never build key names: every key they touch is passed in KEYS (Cluster safe) and is
 * built in `keys.ts` — except two readers that walk many keys of one hash tag, with prefixes
 * keys.ts gives them (CLAIM_CENSUS_PAGE; the timeline counters, lib/runs/timeline-counters.ts),
 * and the run scripts' lane mark (lib/runs/scripts.ts laneBegins, lanePublished), which deletes the
 * idempotency key its lane HASH names (a key keys.ts built, of the same hash tag).
 */
import type { ChainableCommander, Redis } from "ioredis";
import { REPLY } from "./replies";

export interface LuaScript<KeyNames extends readonly string[] = readonly string[], Reply = unknown> {
  /** The ioredis command name the script is registered under. */
  readonly command: string;
  /** Names of KEYS[1..n], in order (documentation and arity). */
  readonly keys: KeyNames;
  /** More KEYS follow the named ones (their count is passed on each call): `runVariadicScript`. */
  readonly variadicKeys?: true;
  readonly lua: string;
  /** The reply's type, as the header's Returns says (a type only: never set at run time). */
  readonly reply?: Reply;
}

/**
 * A script whose reply is typed: `typedScript<number>()({ command, keys, lua })`. `runScript`
 * and `runVariadicScript` then resolve to `Reply` instead of `unknown`.
 */
export function typedScript<Reply>() {
  return <const S extends Omit<LuaScript, "reply">>(script: S): S & { readonly reply?: Reply } => script;
}

/**
 * `nowMs`: the server's time in ms. A Lua number (a double) holds it exactly, and Redis passes a
 * number argument to a command as "%.17g", i.e. as the plain integer.
 */
export const SERVER_NOW = `
local serverTime = redis.call('TIME')
local nowMs = serverTime[1] * 1000 + math.floor(serverTime[2] / 1000)
`;

/** HMGET answers `false` for a missing field; a `false`/nil inside a returned table truncates it. */
const OR_EMPTY = `
local function orEmpty(value)
  if value then return value end
  return ''
end
`;

/**
 * Entries kept per live-events stream (lib/events; approximately: `~` lets Redis trim whole
 * radix-tree nodes). A browser that was away for more than this many changes reloads its data
 * instead of resuming.
 */
export const EVENTS_KEPT = 10_000;

/**
 * The live stream in Lua (lib/events): `publish(eventsKey, json)` writes the entry with the change
 * it reports, in the same script; an empty json writes nothing. A failed XADD (a damaged stream
 * key) is ignored: a lost event never fails the write it reports (browsers fall back to
 * re-reading, lib/events/hub.ts).
 */
export const PUBLISH_EVENT_LUA = `
local function publish(eventsKey, json)
  if json and json ~= '' then
    redis.pcall('XADD', eventsKey, 'MAXLEN', '~', ${EVENTS_KEPT}, '*', 'e', json)
  end
end
`;

/**
 * The claim metadata hash, as returned to a contender or an operator (HMGET, in this order).
 * The token is not repeated here: the claim key holds it, and the two are written together.
 * Fields the scripts read or write are separate; the holder's identity (host, pid, workerId,
 * runId, rebuild, tenant, version, stopWithinMs), which is only displayed (and read by a force
 * release), is one JSON field written once per grant: every extra ARGV and hash field costs the
 * acquire script measurably (bench/claims.ts). `revokedBy`/`revokedAt` exist only while an
 * operator's force release waits for the holder to stop (CLAIM_FORCE_RELEASE).
 */

/**
 * A force-released claim's value: this prefix and the holder's token. It keeps everyone else out
 * until the holder has stopped (Chubby's / Consul's "lock-delay"): the holder's next refresh
 * answers `revoked`, its work aborts, and its release in `finally` deletes the marker.
 */
export const REVOKED_PREFIX = "revoked!"; // "!" never occurs in a token (host:pid:hex)

/** Entries kept per claim name's trail, and in the recently-ended stream (both `MAXLEN ~`). */
export const TRAIL_MAX = 50;
export const ENDED_MAX = 200;

/**
 * The claim trail in Lua (lib/claims/trail.ts reads it). `trail(kind, fields)` appends to the
 * name's trail and, for a kind that ends a claim, to the recently-ended stream; `noteExpiry()`
 * appends "expired" (with the last holder) when the trail's newest entry is a claim still
 * running but the claim is gone: called where a script finds the name free. Entry fields:
 * e kind, n name, f fence, h holder identity JSON, by actor, why reason, ms a duration.
 * Claims acquired without a trail (a pruner's, the alert evaluator's) write none.
 */
const TRAIL_LUA = (trailKey: string, endedKey: string, nameArg: string) => `
local ENDING = {released = true, stopped = true, expired = true, ['taken-over'] = true}
local RUNNING = {acquired = true, ['taken-over'] = true, ['refreshed-late'] = true, ['force-released'] = true}
local function trail(kind, fields)
  redis.call('XADD', ${trailKey}, 'MAXLEN', '~', ${TRAIL_MAX}, '*', 'e', kind, 'n', ${nameArg}, unpack(fields))
  if ENDING[kind] then
    redis.call('XADD', ${endedKey}, 'MAXLEN', '~', ${ENDED_MAX}, '*', 'e', kind, 'n', ${nameArg}, unpack(fields))
  end
end
local function noteExpiry()
  local last = redis.call('XREVRANGE', ${trailKey}, '+', '-', 'COUNT', 1)[1]
  if not last then return end
  local entry = {}
  for i = 1, #last[2], 2 do entry[last[2][i]] = last[2][i + 1] end
  if not RUNNING[entry.e] then return end
  local fields = {'f', entry.f or '', 'h', entry.h or ''}
  if entry.e == 'force-released' then
    fields[#fields + 1] = 'why'
    fields[#fields + 1] = 'force-released, and its holder never acknowledged: the release window ran out'
  end
  trail('expired', fields)
end
`;
export const META_FIELDS = [
  "jobId",
  "fence",
  "ttlMs",
  "refreshEveryMs",
  "acquiredAt",
  "refreshedAt",
  "holder",
  "revokedBy",
  "revokedAt",
] as const;
const META_FIELDS_LUA = META_FIELDS.map((field) => `'${field}'`).join(", ");
const META_INDEX = (field: (typeof META_FIELDS)[number]) => META_FIELDS.indexOf(field) + 1;

export const CLAIM_ACQUIRE = {
  command: "claimwatchClaimAcquire",
  keys: ["claim", "claimMeta", "claimFence", "claimRegistry", "claimTrail", "claimsEnded", "claimRefreshes", "events"],
  lua: `
--[[ Acquire a claim, or take it over from an earlier attempt of the same job.
KEYS[1] claim          STRING holder token, PX ttl
KEYS[2] claimMeta      HASH ${META_FIELDS.join(", ")}; PX ttl
KEYS[3] claimFence     STRING fence counter (INCR on every grant; never expires)
KEYS[4] claimRegistry  ZSET of claim names (score 0)
KEYS[5] claimTrail     STREAM (capped)   KEYS[6] claimsEnded STREAM (capped)
KEYS[7] claimRefreshes ZSET claim name -> refreshedAt
KEYS[8] events         STREAM the live events (lib/events) of the claims' Redis
ARGV[1] token   ARGV[2] ttlMs   ARGV[3] claim name
ARGV[4] jobId: a holder with this same non-empty job id is an earlier attempt and is taken over,
  unless both say their attempt (the identity's "attempt") and the holder's is the later one
ARGV[5] refreshEveryMs   ARGV[6] holder identity (JSON; "attempt" read here)
ARGV[7] fence floor: the highest fence published for the output as recorded outside Redis (its
  durable file beside the output; 0 or absent: none). A counter below it (Redis lost writes) is
  raised to it before the INCR, so no fence used for a publish is granted again.
ARGV[8] '1': keep this claim's trail (acquired, refreshed late, released…); '' for housekeeping
  claims (pruning, alert evaluation). Either way a free name whose trail says its last claim
  was still running gets its "expired" entry first.
ARGV[9] the claim.acquired event's JSON without its last three members and closing brace (the
  script appends "fence", "acquiredAt" and "tookOverFrom"); '' writes no event
Every metadata field is written on every grant, so nothing of an earlier holder survives.
Returns
  {1, fence, acquiredAt}                                acquired: the name was free
  {2, fence, acquiredAt, previousToken, previousFence}  took over from the same job id
  {0, pttl, ${META_FIELDS.join(", ")}}   held by another job, or force-released and its holder
                                         not yet stopped (revokedAt set): nothing written
]]
${OR_EMPTY}
${TRAIL_LUA("KEYS[5]", "KEYS[6]", "ARGV[3]")}
${PUBLISH_EVENT_LUA}
-- The attempt an identity names; 0 when it names none.
local function attemptOf(json)
  local ok, identity = pcall(cjson.decode, json or '')
  if not ok or type(identity) ~= 'table' then return 0 end
  return tonumber(identity.attempt) or 0
end
-- Both name their attempt and the holder's is the later one (unknown order: not later).
local function laterHolder(mine, theirs)
  local a, b = attemptOf(mine), attemptOf(theirs)
  return a > 0 and b > 0 and a < b
end
local code = 1
local previousToken = ''
local previousFence = ''
local previousHolder = ''
-- The common case in one call: SET NX PX is the grant.
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local meta = redis.call('HMGET', KEYS[2], ${META_FIELDS_LUA})
  -- A force-released holder may still be stopping: not even its own job's next attempt may
  -- take over before it has acknowledged (or its release window ran out).
  -- Takeovers go one way: an attempt never takes the claim back from a later attempt of its job
  -- (its lock was lost, the job redelivered; the later attempt carries the request on).
  if ARGV[4] == '' or meta[${META_INDEX("jobId")}] ~= ARGV[4] or meta[${META_INDEX("revokedAt")}]
      or laterHolder(ARGV[6], meta[${META_INDEX("holder")}]) then
    local reply = {0, redis.call('PTTL', KEYS[1])}
    for i = 1, ${META_FIELDS.length} do reply[i + 2] = orEmpty(meta[i]) end
    return reply
  end
  code = 2
  previousToken = redis.call('GET', KEYS[1])
  previousFence = orEmpty(meta[${META_INDEX("fence")}])
  previousHolder = orEmpty(meta[${META_INDEX("holder")}])
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
end
-- A name still registered although it was free: its last claim ended by expiry, not by a script.
-- Every script that unregisters a name writes its trail's ending first when the trail has a claim
-- running (a release or its acknowledgement, a prune, a force release of a claim already gone), so
-- only then can the trail's newest entry be a claim still running, and only then is it read.
if redis.call('ZADD', KEYS[4], 0, ARGV[3]) == 0 and code == 1 then noteExpiry() end
${SERVER_NOW}
local floor = tonumber(ARGV[7] or '0') or 0
if floor > 0 and tonumber(redis.call('GET', KEYS[3]) or '0') < floor then
  redis.call('SET', KEYS[3], floor)
end
local fence = redis.call('INCR', KEYS[3])
redis.call('HSET', KEYS[2], 'jobId', ARGV[4], 'fence', fence, 'ttlMs', ARGV[2],
  'refreshEveryMs', ARGV[5], 'acquiredAt', nowMs, 'refreshedAt', nowMs, 'holder', ARGV[6],
  'trail', ARGV[8] == '1' and '1' or '0')
redis.call('PEXPIRE', KEYS[2], ARGV[2])
redis.call('ZADD', KEYS[7], nowMs, ARGV[3])
if ARGV[8] == '1' then
  if code == 2 then trail('taken-over', {'f', previousFence, 'h', previousHolder, 'by', ARGV[6]}) end
  trail('acquired', {'f', fence, 'h', ARGV[6], 'ms', ARGV[2]})
end
if ARGV[9] and ARGV[9] ~= '' then
  local tookOver = 'null'
  if code == 2 then
    local pf = tonumber(previousFence)
    tookOver = '{"token":' .. cjson.encode(previousToken) .. ',"fence":' .. (pf and string.format('%d', pf) or 'null') .. '}'
  end
  publish(KEYS[8], ARGV[9] .. ',"fence":' .. string.format('%d', fence) .. ',"acquiredAt":' .. string.format('%d', nowMs)
    .. ',"tookOverFrom":' .. tookOver .. '}')
end
if code == 2 then return {2, fence, nowMs, previousToken, previousFence} end
return {1, fence, nowMs}
`,
} as const satisfies LuaScript;

export const CLAIM_REFRESH = typedScript<number>()({
  command: "claimwatchClaimRefresh",
  keys: ["claim", "claimMeta", "claimTrail", "claimsEnded", "claimRefreshes", "events"],
  lua: `
--[[ Extend a claim the caller still holds. A refresh later than two intervals after the last one
is written to the claim's trail ("refreshed-late", with the gap).
KEYS[1] claim   KEYS[2] claimMeta   KEYS[3] claimTrail   KEYS[4] claimsEnded   KEYS[5] claimRefreshes
KEYS[6] events (the live stream, lib/events)
ARGV[1] token   ARGV[2] ttlMs   ARGV[3] claim name   ARGV[4] the claim.refreshed event's JSON, written
when refreshed ('' none)
Returns ${REPLY.done} refreshed (both keys PEXPIRE ttl, refreshedAt = now, in the metadata and in claimRefreshes) | ${REPLY.missing} missing | ${REPLY.notOwner} not the owner
      | ${REPLY.revoked} an operator force-released it: stop, then release to acknowledge (nothing changed)
]]
local current = redis.call('GET', KEYS[1])
if not current then return ${REPLY.missing} end
if current == '${REVOKED_PREFIX}' .. ARGV[1] then return ${REPLY.revoked} end
if current ~= ARGV[1] then return ${REPLY.notOwner} end
${SERVER_NOW}
local meta = redis.call('HMGET', KEYS[2], 'refreshedAt', 'refreshEveryMs', 'trail', 'fence', 'holder')
if meta[3] == '1' then
  local gap = nowMs - (tonumber(meta[1]) or nowMs)
  if gap > 2 * (tonumber(meta[2]) or gap) then
    ${TRAIL_LUA("KEYS[3]", "KEYS[4]", "ARGV[3]")}
    trail('refreshed-late', {'f', meta[4] or '', 'h', meta[5] or '', 'ms', gap})
  end
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('HSET', KEYS[2], 'refreshedAt', nowMs)
redis.call('PEXPIRE', KEYS[2], ARGV[2])
redis.call('ZADD', KEYS[5], nowMs, ARGV[3])
${PUBLISH_EVENT_LUA}
publish(KEYS[6], ARGV[4])
return 1
`,
});

export const CLAIM_RELEASE = typedScript<number>()({
  command: "claimwatchClaimRelease",
  keys: ["claim", "claimMeta", "claimRegistry", "claimTrail", "claimsEnded", "claimRefreshes", "events"],
  lua: `
--[[ Release a claim the caller holds. Never touches a claim held by another token. Its trail
gets "released", or "stopped" when it had been force-released (or "expired" when it was gone).
A claim that keeps no trail (housekeeping) writes "stopped" all the same: its force release wrote
"force-released" to the trail, and the trail must say that it ended.
KEYS[1] claim   KEYS[2] claimMeta   KEYS[3] claimRegistry   KEYS[4] claimTrail   KEYS[5] claimsEnded
KEYS[6] claimRefreshes   KEYS[7] events (the live stream, lib/events)
ARGV[1] token   ARGV[2] claim name   ARGV[3] the claim.released event's JSON, written when released or
acknowledged ('' none)
Returns 1 released (claim, metadata, registry and claimRefreshes entries deleted)
      | ${REPLY.alsoDone} acknowledged: the caller's claim had been force-released and it has stopped;
        the force release's marker is deleted, so the name is free now
      | ${REPLY.missing} missing (it had expired; its stale registry and claimRefreshes entries are dropped on the way)
      | ${REPLY.notOwner} not the owner (nothing changed)
]]
${TRAIL_LUA("KEYS[4]", "KEYS[5]", "ARGV[2]")}
local current = redis.call('GET', KEYS[1])
if not current then
  redis.call('ZREM', KEYS[3], ARGV[2])
  redis.call('ZREM', KEYS[6], ARGV[2])
  noteExpiry()
  return ${REPLY.missing}
end
local code = 1
if current == '${REVOKED_PREFIX}' .. ARGV[1] then code = ${REPLY.alsoDone}
elseif current ~= ARGV[1] then return ${REPLY.notOwner} end
local meta = redis.call('HMGET', KEYS[2], 'trail', 'fence', 'holder', 'acquiredAt')
if meta[1] == '1' or code == ${REPLY.alsoDone} then
  ${SERVER_NOW}
  local held = nowMs - (tonumber(meta[4]) or nowMs)
  trail(code == 1 and 'released' or 'stopped', {'f', meta[2] or '', 'h', meta[3] or '', 'ms', held})
end
redis.call('DEL', KEYS[1], KEYS[2])
redis.call('ZREM', KEYS[3], ARGV[2])
redis.call('ZREM', KEYS[6], ARGV[2])
${PUBLISH_EVENT_LUA}
publish(KEYS[7], ARGV[3])
return code
`,
});

export const CLAIM_FORCE_RELEASE = {
  command: "claimwatchClaimForceRelease",
  keys: ["claim", "claimMeta", "claimRegistry", "claimTrail", "claimsEnded", "claimRefreshes"],
  lua: `
--[[ Operator release, against the token the operator was shown. The holder may be alive (a
stuck step, a wrong guess), so the claim is not freed at once: it becomes '${REVOKED_PREFIX}<token>'
for a release window — the holder's remaining TTL (by then it has noticed, at the latest at its
own deadline) plus the holder's declared stop time (its steps' killGrace) plus a margin — and
nobody, not even the same job's next attempt, can take it meanwhile. The holder's next refresh
answers ${REPLY.revoked}; it stops its work and its release deletes the marker early.
KEYS[1] claim   KEYS[2] claimMeta   KEYS[3] claimRegistry   KEYS[4] claimTrail   KEYS[5] claimsEnded
KEYS[6] claimRefreshes (only the missing branch touches it: a revoked claim keeps its refreshedAt)
ARGV[1] token the operator saw   ARGV[2] claim name   ARGV[3] actor   ARGV[4] margin ms   ARGV[5] reason
The trail gets "force-released" (by, why, the window), whether or not the claim keeps one.
Returns
  {1, token, ${META_FIELDS.join(", ")}, windowMs}   force-released: free when the holder acknowledges, at the latest in windowMs
  {${REPLY.alsoDone}, token, ${META_FIELDS.join(", ")}, pttl}   already force-released, its holder not yet stopped (nothing changed)
  {${REPLY.notOwner}, currentToken, ${META_FIELDS.join(", ")}, pttl}   not the shown token: a newer holder (nothing changed)
  {${REPLY.missing}}   missing (registry and claimRefreshes entries dropped)
]]
${OR_EMPTY}
${TRAIL_LUA("KEYS[4]", "KEYS[5]", "ARGV[2]")}
local current = redis.call('GET', KEYS[1])
if not current then
  redis.call('ZREM', KEYS[3], ARGV[2])
  redis.call('ZREM', KEYS[6], ARGV[2])
  noteExpiry()
  return {${REPLY.missing}}
end
local meta = redis.call('HMGET', KEYS[2], ${META_FIELDS_LUA})
local code = ${REPLY.notOwner}
local ms = redis.call('PTTL', KEYS[1])
if current == '${REVOKED_PREFIX}' .. ARGV[1] then
  code = ${REPLY.alsoDone}
  current = ARGV[1]
elseif current == ARGV[1] then
  code = 1
  local stopWithin = 0
  local ok, identity = pcall(cjson.decode, meta[${META_INDEX("holder")}] or '')
  if ok and type(identity) == 'table' then stopWithin = tonumber(identity['stopWithinMs']) or 0 end
  ms = math.max(ms, 0) + stopWithin + tonumber(ARGV[4])
  ${SERVER_NOW.trim().replace(/\n/g, "\n  ")}
  redis.call('SET', KEYS[1], '${REVOKED_PREFIX}' .. ARGV[1], 'PX', ms)
  redis.call('HSET', KEYS[2], 'revokedBy', ARGV[3], 'revokedAt', nowMs)
  redis.call('PEXPIRE', KEYS[2], ms)
  meta[${META_INDEX("revokedBy")}] = ARGV[3]
  meta[${META_INDEX("revokedAt")}] = nowMs
  trail('force-released', {'f', orEmpty(meta[${META_INDEX("fence")}]), 'h', orEmpty(meta[${META_INDEX("holder")}]),
    'by', ARGV[3], 'why', ARGV[5], 'ms', ms})
end
local reply = {code, current}
for i = 1, ${META_FIELDS.length} do reply[i + 2] = orEmpty(meta[i]) end
reply[#reply + 1] = ms
return reply
`,
} as const satisfies LuaScript;

export const CLAIM_PRUNE = typedScript<number>()({
  command: "claimwatchClaimPrune",
  keys: ["claim", "claimRegistry", "claimTrail", "claimsEnded"],
  lua: `
--[[ Drop a registry entry whose claim expired, unless the name was claimed again meanwhile; the
claim's trail gets its "expired" entry (with the last holder) if it has none yet.
KEYS[1] claim   KEYS[2] claimRegistry   KEYS[3] claimTrail   KEYS[4] claimsEnded
ARGV[1] claim name
Returns 1 pruned | 0 kept (the claim exists)
]]
${TRAIL_LUA("KEYS[3]", "KEYS[4]", "ARGV[1]")}
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('ZREM', KEYS[2], ARGV[1])
noteExpiry()
return 1
`,
});

/** Publishes of a claim name kept in its `publishedRuns` list. */
export const PUBLISHED_RUNS_KEPT = 32;

export const FENCED_PUBLISH = {
  command: "claimwatchFencedPublish",
  keys: ["claimFence", "published", "claimSkips", "claim", "publishedRuns"],
  lua: `
--[[ Fenced compare-and-set of the published pointer; a publish also resets the claim's
consecutive skips (a rebuild completed), in the same round trip.
KEYS[1] claimFence (newest fence issued for the claim)   KEYS[2] published HASH
KEYS[3] claimSkips HASH claim name → consecutive skips   KEYS[4] claim STRING holder token
KEYS[5] publishedRuns LIST (newest first, the last ${PUBLISHED_RUNS_KEPT}): "<ARGV[6]> <fence> <value>
  <publishedAt>", so that a run whose final record was lost is proven to have published after the
  pointer moved on to a newer fence (lib/claims/publish.ts readListedPublish)
ARGV[1] caller's fence   ARGV[2] value (build id / path)   ARGV[3] runId   ARGV[4] claim name
ARGV[5] caller's owner token   ARGV[6] "<run id> <version> <mark>" pushed on KEYS[5] ('' none)
Moves the pointer only if the caller still holds the claim (its token: a force-released or
expired holder is refused even while its fence is still the newest), its fence is the newest
issued AND higher than the published fence.
Returns
  {1, publishedAt}                     published
  {2, publishedAt}                     this fence already published this value (a retried call)
  {${REPLY.notOwner}, newestFence, publishedFence}    superseded or no longer the holder (nothing changed)
]]
local fence = tonumber(ARGV[1])
local newest = tonumber(redis.call('GET', KEYS[1]) or '0')
local current = redis.call('HMGET', KEYS[2], 'fence', 'value', 'publishedAt')
local publishedFence = tonumber(current[1] or '0')
if fence == publishedFence and current[2] == ARGV[2] then return {2, current[3]} end
if fence ~= newest or fence <= publishedFence or redis.call('GET', KEYS[4]) ~= ARGV[5] then
  return {${REPLY.notOwner}, newest, publishedFence}
end
${SERVER_NOW}
redis.call('HSET', KEYS[2], 'fence', ARGV[1], 'value', ARGV[2], 'runId', ARGV[3], 'publishedAt', nowMs)
redis.call('HDEL', KEYS[3], ARGV[4])
if ARGV[6] and ARGV[6] ~= '' then
  redis.call('LPUSH', KEYS[5], ARGV[6] .. ' ' .. ARGV[1] .. ' ' .. ARGV[2] .. ' ' .. nowMs)
  redis.call('LTRIM', KEYS[5], 0, ${PUBLISHED_RUNS_KEPT - 1})
end
return {1, nowMs}
`,
} as const satisfies LuaScript;

export const PUBLISHED_RESTORE = typedScript<number>()({
  command: "claimwatchPublishedRestore",
  keys: ["published", "claimFence"],
  lua: `
--[[ Put back a publish the claims Redis forgot (a crash with RDB-only or AOF everysec data, an
asynchronous replica promoted): the output's durable record (published-fence.ts) says fence N
published hash H; if the pointer is older (or gone), or at fence N with another build (Redis lost
writes and granted N twice: the build recorded first is the output's), it becomes {N, H} again,
and the fence counter is raised to at least N (no fence used for a publish is granted again).
KEYS[1] published HASH   KEYS[2] claimFence STRING
ARGV[1] durable fence   ARGV[2] durable hash
Returns 1 restored | 0 the pointer is newer, or already {N, H} (nothing changed)
]]
local fence = tonumber(ARGV[1])
if tonumber(redis.call('GET', KEYS[2]) or '0') < fence then redis.call('SET', KEYS[2], fence) end
local pointer = redis.call('HMGET', KEYS[1], 'fence', 'value')
local pointerFence = tonumber(pointer[1] or '0') or 0
if pointerFence > fence or (pointerFence == fence and pointer[2] == ARGV[2]) then return 0 end
${SERVER_NOW}
redis.call('HSET', KEYS[1], 'fence', ARGV[1], 'value', ARGV[2], 'runId', '', 'publishedAt', nowMs, 'restored', '1')
return 1
`,
});

export const AUDIT_APPEND = {
  command: "claimwatchAuditAppend",
  keys: ["auditLog"],
  lua: `
--[[ Append an audit entry and trim entries older than the retention (exact MINID trim, so
nothing younger than the retention is ever removed), then cap the stream's length (approximate
MAXLEN), so a flood of refused requests cannot fill a noeviction Redis. Entry ids carry the
server's time.
KEYS[1] auditLog STREAM
ARGV[1] retentionMs   ARGV[2] maxEntries   ARGV[3..] field/value pairs
Returns the new entry id
]]
local serverTime = redis.call('TIME')
local nowMs = tonumber(serverTime[1]) * 1000 + math.floor(tonumber(serverTime[2]) / 1000)
local minId = string.format('%.0f', nowMs - tonumber(ARGV[1]))
local id = redis.call('XADD', KEYS[1], 'MINID', minId, '*', unpack(ARGV, 3))
redis.call('XTRIM', KEYS[1], 'MAXLEN', '~', ARGV[2])
return id
`,
} as const satisfies LuaScript;

export const ALERTS_COMMIT = {
  command: "claimwatchAlertsCommit",
  keys: [
    "alertsFence",
    "alertsVersion",
    "alertsFiring",
    "alertsPending",
    "alertsTransitions",
    "alertsOutbox",
    "alertsDeliveries",
    "metricsCounters",
  ],
  lua: `
--[[ Commit one alert evaluation: the state moves only for the newest evaluator (fence), and only
from the state that evaluation read (version), so every transition is recorded exactly once.
KEYS[1] alertsFence        STRING newest evaluator fence that committed
KEYS[2] alertsVersion      STRING counter, +1 per commit
KEYS[3] alertsFiring       HASH alert id -> firing alert JSON
KEYS[4] alertsPending      HASH alert id -> since (ms)
KEYS[5] alertsTransitions  STREAM, field 'transition' (JSON), MAXLEN ~ ARGV[4]
KEYS[6] alertsOutbox       ZSET delivery id -> order
KEYS[7] alertsDeliveries   HASH delivery id -> delivery JSON
KEYS[8] metricsCounters    HASH (lib/metrics/counters)
ARGV[1] the evaluator's fence   ARGV[2] the version its snapshot read
ARGV[3] changes, JSON object of lists: fire (pairs id, alert json), resolve (ids), transitions
        (json strings), deliveries (pairs id, delivery json), pendingSet (pairs id, since),
        pendingDel (ids), incr (pairs counter field, n), set (pairs counter field, value)
ARGV[4] transitions kept
Returns
  {1, version}        committed; version is the new state version
  {-6, newestFence}   refused: a newer evaluator has committed (this one lost its claim)
  {-7, version}       refused: the state changed since this evaluation read it
]]
local fence = tonumber(ARGV[1])
local newest = tonumber(redis.call('GET', KEYS[1]) or '0')
if fence < newest then return {-6, newest} end
local version = tonumber(redis.call('GET', KEYS[2]) or '0')
if version ~= tonumber(ARGV[2]) then return {-7, version} end
if fence > newest then redis.call('SET', KEYS[1], fence) end
local changes = cjson.decode(ARGV[3])
for _, item in ipairs(changes.fire) do redis.call('HSET', KEYS[3], item[1], item[2]) end
for _, id in ipairs(changes.resolve) do redis.call('HDEL', KEYS[3], id) end
for _, item in ipairs(changes.pendingSet) do redis.call('HSET', KEYS[4], item[1], item[2]) end
for _, id in ipairs(changes.pendingDel) do redis.call('HDEL', KEYS[4], id) end
for _, json in ipairs(changes.transitions) do
  redis.call('XADD', KEYS[5], 'MAXLEN', '~', ARGV[4], '*', 'transition', json)
end
local committed = version + 1
for i, item in ipairs(changes.deliveries) do
  redis.call('HSET', KEYS[7], item[1], item[2])
  redis.call('ZADD', KEYS[6], committed * 100000 + i, item[1])
end
for _, item in ipairs(changes.incr) do redis.call('HINCRBY', KEYS[8], item[1], item[2]) end
for _, item in ipairs(changes.set) do redis.call('HSET', KEYS[8], item[1], item[2]) end
redis.call('SET', KEYS[2], committed)
return {1, committed}
`,
} as const satisfies LuaScript;

/** The claimMeta fields a census record carries, in its order (after the PTTL). */
export const CENSUS_FIELDS = ["refreshedAt", "refreshEveryMs", "acquiredAt", "fence", "revokedAt", "holder"] as const;
/** Lua: a census record's fields after the PTTL, from the HMGET of CENSUS_FIELDS in `m`. */
const CENSUS_RECORD_LUA = CENSUS_FIELDS.map((_, i) => (i === 0 ? "m[1]" : `(m[${i + 1}] or '')`)).join(" .. ',' .. ");

export const CLAIM_CENSUS = {
  command: "claimwatchClaimCensus",
  keys: ["claimsTime"],
  variadicKeys: true,
  lua: `
--[[ Read many claims in one call (the /metrics scrape reads every claim every scrape; the alert
evaluator the ones CLAIM_STALE_CANDIDATES picked). Each claim comes back as one string holding
only what staleness, the alerts and the metrics read: one reply value per claim, not one per field
(decoding ten values per claim was most of the census' time at 10 000 claims).
KEYS[1] claimsTime  unused placeholder (any key of the hash tag), so the script has a slot
KEYS[2k], KEYS[2k+1]  claim (STRING) and claimMeta (HASH) of the k-th claim
ARGV[1] ignored
Returns {serverTimeMs, record1, record2, ...}, one record per claim, in KEYS order:
  ''  the claim is gone (PTTL < 0: expired since the registry was read) or its metadata has no
      refreshedAt (no metadata hash)
  'pttl,${CENSUS_FIELDS.join(",")}'  otherwise; absent fields are ''. The holder JSON comes
      last and may contain commas; the fields before it are numbers written by the claim scripts.
]]
local t = redis.call('TIME')
local out = {t[1] * 1000 + math.floor(t[2] / 1000)}
for i = 2, #KEYS, 2 do
  local pttl = redis.call('PTTL', KEYS[i])
  local m = redis.call('HMGET', KEYS[i + 1], ${CENSUS_FIELDS.map((field) => `'${field}'`).join(", ")})
  if pttl < 0 or not m[1] or m[1] == '' then
    out[#out + 1] = ''
  else
    out[#out + 1] = pttl .. ',' .. ${CENSUS_RECORD_LUA}
  end
end
return out
`,
} as const satisfies LuaScript;

/** Claims per CLAIM_CENSUS_PAGE call: a few ms of Redis time each. */
export const CENSUS_PAGE_SIZE = 2_000;

export const CLAIM_CENSUS_PAGE = typedScript<(string | number)[]>()({
  command: "claimwatchClaimCensusPage",
  keys: ["claimRegistry"],
  lua: `
--[[ CLAIM_CENSUS for a page of the registry, walked here: the /metrics scrape reads every claim
every scrape, and sending each claim's two key names (20 000 at 10 000 claims) was a third of the
scrape's Redis time and much of its client time. The one exception to "scripts never build key
names": the claim and metadata keys are ARGV's prefixes (keys.claimKeyPrefixes) and the name,
all under the registry's hash tag, so in the registry's slot (as the timeline counters' keys).
KEYS[1] claimRegistry  ZSET of claim names (score 0, so in name order)
ARGV[1] claim key prefix   ARGV[2] claimMeta key prefix
ARGV[3] where to start: '-' (the first name) or '(' .. the last name of the previous page
ARGV[4] names per page
Returns {serverTimeMs, lastName, record1, record2, ...}: lastName is the page's last registry name
  ('' when the page was the registry's last); a record per held claim, in name order:
  'name\\npttl,${CENSUS_FIELDS.join(",")}' as CLAIM_CENSUS's records (names have no control
  characters). A name whose claim is gone (expired since it was registered) or has no metadata
  is left out.
]]
local names = redis.call('ZRANGEBYLEX', KEYS[1], ARGV[3], '+', 'LIMIT', 0, tonumber(ARGV[4]))
local t = redis.call('TIME')
local last = ''
if #names == tonumber(ARGV[4]) then last = names[#names] end
local out = {t[1] * 1000 + math.floor(t[2] / 1000), last}
for _, name in ipairs(names) do
  local pttl = redis.call('PTTL', ARGV[1] .. name)
  if pttl >= 0 then
    local m = redis.call('HMGET', ARGV[2] .. name, ${CENSUS_FIELDS.map((field) => `'${field}'`).join(", ")})
    if m[1] and m[1] ~= '' then
      out[#out + 1] = name .. '\\n' .. pttl .. ',' .. ${CENSUS_RECORD_LUA}
    end
  end
end
return out
`,
});

export const CLAIM_STALE_CANDIDATES = {
  command: "claimwatchClaimStaleCandidates",
  keys: ["claimsTime"],
  variadicKeys: true,
  lua: `
--[[ Which of many claims may be stale now or within a margin (the alert evaluator reads these
with CLAIM_CENSUS and lets staleReasons, lib/claims/stale.ts, decide; most claims are healthy, and
reading one metadata hash per claim here is about half the Redis work of the census' PTTL + HMGET).
"May be stale" is a superset of staleReasons: a claim is left out only when it is surely healthy
until now + ARGV[2], i.e.
  its refresh is not overdue by then: refreshedAt and refreshEveryMs are numbers, refreshEveryMs
    <= 0 or now + ARGV[2] - refreshedAt <= ARGV[1] * refreshEveryMs (or refreshEveryMs is absent:
    staleReasons skips the check then too), and
  its holder is live or has none: no holder JSON, or a plain "workerId":"<id>" entry with id ''
    or one of ARGV[3..n];
or when it has no refreshedAt (no metadata: the census leaves it out). Anything else (an
unparsable number, a workerId with escapes or without that entry) is a candidate.
KEYS[1] claimsTime  unused placeholder (any key of the hash tag), so the script has a slot
KEYS[2..n]  claimMeta (HASH) of each claim
ARGV[1] refresh intervals without a refresh after which a claim is stale (STALE_AFTER_REFRESHES)
ARGV[2] margin, ms (covers the time until the candidates are read)
ARGV[3..n] ids of the workers with a live heartbeat
Returns {k1, k2, ...}: the candidates' positions (1-based) among KEYS[2..n]
]]
local t = redis.call('TIME')
local soonMs = t[1] * 1000 + math.floor(t[2] / 1000) + tonumber(ARGV[2])
local intervals = tonumber(ARGV[1])
local live = {}
for i = 3, #ARGV do live[ARGV[i]] = true end
local function mayBeStale(m)
  if not m[1] or m[1] == '' then return false end
  local refreshedAt = tonumber(m[1])
  if not refreshedAt then return true end
  if m[2] and m[2] ~= '' then
    local every = tonumber(m[2])
    if not every then return true end
    if every > 0 and soonMs - refreshedAt > intervals * every then return true end
  end
  if not m[3] or m[3] == '' then return false end
  local id = string.match(m[3], '"workerId":"([^"\\\\]*)"')
  if id == nil then return true end
  return id ~= '' and not live[id]
end
local out = {}
for i = 2, #KEYS do
  if mayBeStale(redis.call('HMGET', KEYS[i], 'refreshedAt', 'refreshEveryMs', 'holder')) then
    out[#out + 1] = i - 1
  end
end
return out
`,
} as const satisfies LuaScript;

export const CLAIM_NOT_REFRESHED = {
  command: "claimwatchClaimNotRefreshed",
  keys: ["claimRefreshes", "claimRegistry"],
  lua: `
--[[ The claims the alert evaluator must look at, without visiting every claim: those whose last
refresh (claimRefreshes, kept by the claim scripts) is at least ARGV[1] ms old at now + ARGV[2],
and every registered claim that has no claimRefreshes entry (acquired by a claimwatch that did not
keep it yet: ZDIFF, O(registry) in C; on a Redis before 6.2, which has no ZDIFF, one ZSCORE per
registered claim instead). Entries of expired claims come back too: callers read the claims
themselves (CLAIM_CENSUS) and drop such entries with CLAIM_REFRESHES_PRUNE.
KEYS[1] claimRefreshes  ZSET claim name -> refreshedAt
KEYS[2] claimRegistry   ZSET of claim names
ARGV[1] age, ms   ARGV[2] margin, ms (covers the time until the claims are read)
Returns {serverTimeMs, {name, ...}, {name, ...}}: names last refreshed at or before
  now + ARGV[2] - ARGV[1], oldest first; then registered names without an entry
]]
local t = redis.call('TIME')
local nowMs = t[1] * 1000 + math.floor(t[2] / 1000)
local upTo = string.format('%.0f', nowMs + tonumber(ARGV[2]) - tonumber(ARGV[1]))
local unindexed = redis.pcall('ZDIFF', 2, KEYS[2], KEYS[1])
if type(unindexed) == 'table' and unindexed.err then
  unindexed = {}
  for _, name in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do
    if not redis.call('ZSCORE', KEYS[1], name) then unindexed[#unindexed + 1] = name end
  end
end
return {nowMs, redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', upTo), unindexed}
`,
} as const satisfies LuaScript;

export const CLAIM_REFRESHES_PRUNE = typedScript<number>()({
  command: "claimwatchClaimRefreshesPrune",
  keys: ["claimRefreshes"],
  variadicKeys: true,
  lua: `
--[[ Drop the claimRefreshes entries of expired claims (an expiry runs no script, so it leaves its
entry behind). Checked here, atomically: a name claimed again since the caller saw it gone keeps
its (new) entry.
KEYS[1] claimRefreshes   KEYS[2..n] claim (STRING) of each name, in ARGV order
ARGV[1] the first claim name, ARGV[2..n-1] the others (ARGV[k] goes with KEYS[k + 1])
Returns the number of entries dropped
]]
local dropped = 0
for i = 2, #KEYS do
  if redis.call('EXISTS', KEYS[i]) == 0 then dropped = dropped + redis.call('ZREM', KEYS[1], ARGV[i - 1]) end
end
return dropped
`,
});

export const NEWEST_IN_INDEXES = {
  command: "claimwatchNewestInIndexes",
  keys: ["anchor"],
  variadicKeys: true,
  lua: `
--[[ The newest entry of many run indexes in one call (alert evaluation reads three per series).
KEYS[1] anchor  any key of the hash tag (unused), so the call has a slot with no indexes too
KEYS[2..n] run index ZSETs (runId -> createdAt)
ARGV[1] ignored
Returns {member, score, member, score, ...}: per index its newest entry, '' and '' when empty
]]
local out = {}
for i = 2, #KEYS do
  local newest = redis.call('ZREVRANGE', KEYS[i], 0, 0, 'WITHSCORES')
  out[#out + 1] = newest[1] or ''
  out[#out + 1] = newest[2] or ''
end
return out
`,
} as const satisfies LuaScript;

export const UNSERVED_TICKS = {
  command: "claimwatchUnservedTicks",
  keys: ["anchor"],
  variadicKeys: true,
  lua: `
--[[ The scheduled ticks no run answered, for many series in one call (alert evaluation: one
command instead of two per scheduled series): per series, the expected ticks with
after < tick <= ARGV[1] that are not the tick (score) of a run in scheduleTicks above after.
KEYS[1] anchor  any key of the hash tag (unused), so the call has a slot with no series too
KEYS[2k], KEYS[2k+1]  expectedTicks (ZSET tick -> tick) and scheduleTicks (ZSET runId -> tick) of
  the k-th series
ARGV[1] due until (ms: now - grace)   ARGV[1 + k] the k-th series' after (ms, exclusive)
Returns {ticks1, ticks2, ...}: per series its unserved ticks, oldest first, joined by ',' ('' if none)
]]
local out = {}
for i = 2, #KEYS, 2 do
  local after = '(' .. ARGV[i / 2 + 1]
  local expected = redis.call('ZRANGEBYSCORE', KEYS[i], after, ARGV[1])
  local unserved = {}
  if #expected > 0 then
    local served = {}
    local runs = redis.call('ZRANGEBYSCORE', KEYS[i + 1], after, '+inf', 'WITHSCORES')
    for j = 2, #runs, 2 do served[tonumber(runs[j])] = true end
    for _, tick in ipairs(expected) do
      if not served[tonumber(tick)] then unserved[#unserved + 1] = tick end
    end
  end
  out[#out + 1] = table.concat(unserved, ',')
end
return out
`,
} as const satisfies LuaScript;

export const HASH_AS_LINES = {
  command: "claimwatchHashAsLines",
  keys: ["hash"],
  lua: `
--[[ A whole hash as one string, field and value on alternate lines: the /metrics scrape reads the
metrics counters hash (~17 000 fields with 1 000 series), and one reply value decodes far faster
than 34 000 (ioredis then also builds an object of 17 000 keys). Only for hashes whose fields and
values hold no newline (lib/metrics/counters: names match NAME_PATTERN, values are numbers).
KEYS[1] hash
ARGV[1] unused (none is passed)
Returns 'field1\\nvalue1\\nfield2\\nvalue2...' ('' for a missing or empty hash)
]]
return table.concat(redis.call('HGETALL', KEYS[1]), '\\n')
`,
} as const satisfies LuaScript;

/** The scripts defined in this file (domains keep their own, e.g. lib/runs/scripts.ts). */
export const ALL_SCRIPTS: readonly LuaScript[] = [
  CLAIM_ACQUIRE,
  CLAIM_REFRESH,
  CLAIM_RELEASE,
  CLAIM_FORCE_RELEASE,
  CLAIM_PRUNE,
  PUBLISHED_RESTORE,
  FENCED_PUBLISH,
  AUDIT_APPEND,
  ALERTS_COMMIT,
  CLAIM_CENSUS,
  CLAIM_CENSUS_PAGE,
  CLAIM_STALE_CANDIDATES,
  CLAIM_NOT_REFRESHED,
  CLAIM_REFRESHES_PRUNE,
  NEWEST_IN_INDEXES,
  UNSERVED_TICKS,
  HASH_AS_LINES,
];

/** The narrowest client that can run scripts. */
export type ScriptingClient = Pick<Redis, "defineCommand">;
/** A scripting client that can also open a pipeline (for batched script calls). */
export type ScriptingPipelineClient = Pick<Redis, "defineCommand" | "pipeline">;

type Arg = string | number;
type KeyTuple<K extends readonly string[]> = { readonly [I in keyof K]: string };
type ScriptMethod<R> = (...keysThenArgs: Arg[]) => R;

const registered = new WeakSet<object>();

/**
 * Defines every script on `client` once; later calls are no-ops (ioredis would otherwise
 * recompute and overwrite the definitions on each call). A pipeline only has the script
 * methods when it is opened after this ran.
 */
export function registerScripts(client: ScriptingClient): void {
  if (registered.has(client)) return;
  for (const script of ALL_SCRIPTS) {
    client.defineCommand(script.command, {
      // Without numberOfKeys, ioredis takes the count as the first argument of each call.
      ...(script.variadicKeys ? {} : { numberOfKeys: script.keys.length }),
      lua: script.lua,
    });
  }
  registered.add(client);
}

/** Defines `script` on `client` if it is not yet (scripts of other domains register here). */
function ensureScript(client: ScriptingClient, script: LuaScript): void {
  registerScripts(client);
  if (typeof (client as unknown as Record<string, unknown>)[script.command] === "function") return;
  client.defineCommand(script.command, {
    ...(script.variadicKeys ? {} : { numberOfKeys: script.keys.length }),
    lua: script.lua,
  });
}

/** Runs `script` with its KEYS (a tuple in the header's order) and ARGV. One round trip. */
export function runScript<K extends readonly string[], R = unknown>(
  client: ScriptingClient,
  script: LuaScript<K, R> & { variadicKeys?: never },
  keys: KeyTuple<K>,
  args: readonly Arg[],
): Promise<R> {
  ensureScript(client, script);
  const method = (client as unknown as Record<string, ScriptMethod<Promise<R>>>)[script.command];
  return method!.call(client, ...(keys as readonly string[]), ...args);
}

/** Runs a `variadicKeys` script: its named KEYS, then `moreKeys`, then ARGV. One round trip. */
export function runVariadicScript<K extends readonly string[], R = unknown>(
  client: ScriptingClient,
  script: LuaScript<K, R> & { variadicKeys: true },
  keys: KeyTuple<K>,
  moreKeys: readonly string[],
  args: readonly Arg[],
): Promise<R> {
  ensureScript(client, script);
  const method = (client as unknown as Record<string, ScriptMethod<Promise<R>>>)[script.command];
  const allKeys = [...(keys as readonly string[]), ...moreKeys];
  return method!.call(client, allKeys.length, ...allKeys, ...args);
}

/** A pipeline that carries the script methods (opened after registration), `extra` included. */
export function scriptPipeline(client: ScriptingPipelineClient, extra: readonly LuaScript[] = []): ChainableCommander {
  registerScripts(client);
  for (const script of extra) ensureScript(client, script);
  return client.pipeline();
}

/** Queues `script` on a pipeline from `scriptPipeline`. */
export function queueScript<K extends readonly string[]>(
  pipeline: ChainableCommander,
  script: LuaScript<K> & { variadicKeys?: never },
  keys: KeyTuple<K>,
  args: readonly Arg[],
): ChainableCommander {
  const method = (pipeline as unknown as Record<string, ScriptMethod<ChainableCommander> | undefined>)[script.command];
  if (!method) throw new Error(`pipeline was opened before the scripts were registered: use scriptPipeline()`);
  return method.call(pipeline, ...(keys as readonly string[]), ...args);
}

/** Queues a `variadicKeys` script on a pipeline from `scriptPipeline(client, [script])`. */
export function queueVariadicScript<K extends readonly string[]>(
  pipeline: ChainableCommander,
  script: LuaScript<K> & { variadicKeys: true },
  keys: KeyTuple<K>,
  moreKeys: readonly string[],
  args: readonly Arg[],
): ChainableCommander {
  const method = (pipeline as unknown as Record<string, ScriptMethod<ChainableCommander> | undefined>)[script.command];
  if (!method) throw new Error(`pipeline was opened before ${script.command} was registered: use scriptPipeline()`);
  const allKeys = [...(keys as readonly string[]), ...moreKeys];
  return method.call(pipeline, allKeys.length, ...allKeys, ...args);
}
