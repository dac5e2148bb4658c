/** Scripts of on-demand triggers (lib/rebuilds/trigger.ts). */
import { typedScript } from "../redis/scripts";

export const REQUEST_ID_RENAME = typedScript<string>()({
  command: "claimwatchRequestIdRename",
  keys: ["triggerRequest"],
  lua: `
--[[ A request id names a job a failover lost (the id kept, the job not): a retry of the request
gives the id its own new job, but only if the id still names the lost one (or nothing). Two
retries of one id at once: one renames it, the other is answered with that one's job.
KEYS[1] triggerRequest STRING (the job id the request queued), PX ttl
ARGV[1] the lost job id   ARGV[2] this retry's job id   ARGV[3] ttl ms
Returns the job id the request names now: ARGV[2] when this retry took it, else the other
retry's (written again, so a WAIT after this call covers it)
]]
local named = redis.call('GET', KEYS[1])
if not named or named == ARGV[1] then named = ARGV[2] end
redis.call('SET', KEYS[1], named, 'PX', ARGV[3])
return named
`,
});
