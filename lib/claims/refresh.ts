/** Refresh: owner-checked `PEXPIRE` of the claim and its metadata, plus `refreshedAt`; one script. */
import { refreshedEvent } from "../events/claim-events";
import type { RedisKeys } from "../redis/keys";
import { CLAIM_REFRESH, runScript, type ScriptingClient } from "../redis/scripts";
import { unexpectedReply } from "./holder";
import type { RefreshResult } from "./types";
import { REPLY } from "../redis/replies";

export async function refreshClaim(
  client: ScriptingClient,
  keys: RedisKeys,
  name: string,
  token: string,
  ttlMs: number,
  /** `liveEvent`: write the `claim.refreshed` live event (lib/events) in the refresh script itself. */
  options: { liveEvent?: boolean } = {},
): Promise<RefreshResult> {
  const reply = await runScript(
    client,
    CLAIM_REFRESH,
    [keys.claim(name), keys.claimMeta(name), keys.claimTrail(name), keys.claimsEnded, keys.claimRefreshes, keys.events],
    [token, ttlMs, name, options.liveEvent ? refreshedEvent(name, token, ttlMs) : ""],
  );
  switch (reply) {
    case REPLY.done:
      return { status: "refreshed" };
    case REPLY.missing:
      return { status: "missing" };
    case REPLY.notOwner:
      return { status: "not-owner" };
    case REPLY.revoked:
      return { status: "revoked" };
    default:
      throw unexpectedReply("refresh", reply);
  }
}
