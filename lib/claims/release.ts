/**
 * Release: owner-checked delete of the claim, its metadata and registry entry; one script.
 * Never deletes a claim held by another token. The fence counter is kept (it never goes back).
 * A holder whose claim an operator force-released acknowledges by releasing it once its work
 * has stopped: that frees the name before the force release's window runs out.
 */
import { releasedEvent } from "../events/claim-events";
import type { RedisKeys } from "../redis/keys";
import { CLAIM_RELEASE, runScript, type ScriptingClient } from "../redis/scripts";
import { unexpectedReply } from "./holder";
import type { ReleaseResult } from "./types";
import { REPLY } from "../redis/replies";

export async function releaseClaim(
  client: ScriptingClient,
  keys: RedisKeys,
  name: string,
  token: string,
  /** `liveEvent`: write the `claim.released` live event (lib/events) in the release script itself. */
  options: { liveEvent?: boolean } = {},
): Promise<ReleaseResult> {
  const reply = await runScript(
    client,
    CLAIM_RELEASE,
    [
      keys.claim(name),
      keys.claimMeta(name),
      keys.claimRegistry,
      keys.claimTrail(name),
      keys.claimsEnded,
      keys.claimRefreshes,
      keys.events,
    ],
    [token, name, options.liveEvent ? releasedEvent(name, token) : ""],
  );
  switch (reply) {
    case REPLY.done:
      return { status: "released" };
    case REPLY.alsoDone:
      return { status: "acknowledged" };
    case REPLY.missing:
      return { status: "missing" };
    case REPLY.notOwner:
      return { status: "not-owner" };
    default:
      throw unexpectedReply("release", reply);
  }
}
