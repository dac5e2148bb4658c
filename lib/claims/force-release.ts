/**
 * Operator force release, checked against the token the operator was shown, so a click on a
 * stale dashboard row can never free a claim that a newer holder took since. Every attempt —
 * released, refused or failed — is written to the audit log.
 *
 * The holder may still be alive (a stuck step; a paused container; a wrong guess at 02:00), so
 * the claim is not simply deleted: it is revoked. Its holder's next refresh says so, its work
 * aborts, and its release acknowledges; until then — at the latest until the release window
 * ends (the holder's remaining TTL, plus the stop time it declared, plus a margin) — nobody else
 * can take the claim, so two runs never write one output because of a force release.
 *
 * The audit log may live on another Redis than the claims (the main one), so the two writes
 * are not atomic: the release happens first, and an audit write that fails is thrown to the
 * operator after the release took effect.
 */
import { appendAudit, noteAuditedFailure } from "../audit/append";
import { claimEvents } from "../events/claim-events";
import type { RedisKeys } from "../redis/keys";
import { CLAIM_FORCE_RELEASE, META_FIELDS, REVOKED_PREFIX, runScript, type ScriptingClient } from "../redis/scripts";
import { InvalidClaimNameError } from "./errors";
import { holderFromFieldList, unexpectedReply } from "./holder";
import { checkClaimName } from "./name";
import type { ClaimHolder } from "./types";
import { REPLY } from "../redis/replies";

/** Added to the release window for scheduling and the holder's release round trip. */
export const FORCE_RELEASE_MARGIN_MS = 1_000;

export interface ForceReleaseRequest {
  name: string;
  /** The token the operator was shown (from `listClaims`). */
  token: string;
  /** Who is doing it. */
  actor: string;
  /** Why; required, it is what the audit log is for. */
  reason: string;
}

export type ForceReleaseResult = { auditId: string } &
  /**
   * Revoked: the holder is told to stop. The name is free once it acknowledges (its release),
   * at the latest after `releaseWindowMs`.
   */
  (
    | { status: "released"; holder: ClaimHolder; releaseWindowMs: number }
    /** Released earlier and its holder has not stopped yet; free at the latest in `releaseWindowMs`. */
    | { status: "releasing"; holder: ClaimHolder; releaseWindowMs: number }
    /** The claim now has another token (a newer holder); nothing was changed. */
    | { status: "not-owner"; currentToken: string; holder: ClaimHolder }
    /** Nobody holds the claim (it expired or was released). */
    | { status: "missing" }
  );

export interface ForceReleaseClients {
  /** The claims Redis. */
  claims: ScriptingClient;
  /** Where the audit log lives (may be the same client). */
  audit: ScriptingClient;
}

export async function forceReleaseClaim(
  clients: ForceReleaseClients,
  keys: RedisKeys,
  request: ForceReleaseRequest,
): Promise<ForceReleaseResult> {
  const { name, token, actor, reason } = request;
  const nameCheck = checkClaimName(name);
  if (!nameCheck.ok) throw new InvalidClaimNameError(name, nameCheck.reason);
  if (!token) throw new RangeError("force release needs the token the operator was shown");
  if (token.startsWith(REVOKED_PREFIX)) {
    throw new RangeError("that is a force release's marker, not a holder's token: the claim is already being released");
  }
  if (!actor.trim()) throw new RangeError("force release needs the acting operator");
  if (!reason.trim()) throw new RangeError("force release needs a reason");

  const audit = (result: "done" | "refused" | "failed", detail: Record<string, unknown>) =>
    appendAudit(clients.audit, keys, { actor, action: "force-release", reason, result, detail });

  let reply: unknown;
  try {
    reply = await runScript(
      clients.claims,
      CLAIM_FORCE_RELEASE,
      [
        keys.claim(name),
        keys.claimMeta(name),
        keys.claimRegistry,
        keys.claimTrail(name),
        keys.claimsEnded,
        keys.claimRefreshes,
      ],
      [token, name, actor, FORCE_RELEASE_MARGIN_MS, reason],
    );
  } catch (error) {
    await audit("failed", { name, token, error: String(error) }).catch(() => {});
    noteAuditedFailure(error);
    throw error;
  }
  if (!Array.isArray(reply)) throw unexpectedReply("force-release", reply);
  const [code] = reply;
  if (code === REPLY.missing && reply.length === 1) {
    const auditId = await audit("refused", { name, token, outcome: "missing" });
    return { status: "missing", auditId };
  }
  if (
    (code === REPLY.done || code === REPLY.alsoDone || code === REPLY.notOwner) &&
    reply.length === META_FIELDS.length + 3
  ) {
    // Another holder's token; a marker of another force release shows as its holder's token.
    const currentToken = String(reply[1]).replace(REVOKED_PREFIX, "");
    const holder = holderFromFieldList(reply, 2);
    const releaseWindowMs = Math.max(0, Number(reply[META_FIELDS.length + 2]));
    const holderDetail = {
      host: holder.host,
      pid: holder.pid,
      workerId: holder.workerId,
      jobId: holder.jobId,
      runId: holder.runId,
      rebuild: holder.rebuild,
      tenant: holder.tenant,
    };
    if (code === REPLY.done) {
      claimEvents(clients.claims, keys, name, token).revoked(actor, releaseWindowMs);
      const auditId = await audit("done", {
        name,
        token,
        fence: holder.fence,
        holder: holderDetail,
        outcome: "released",
        releaseWindowMs,
      });
      return { status: "released", holder, releaseWindowMs, auditId };
    }
    if (code === REPLY.alsoDone) {
      const auditId = await audit("refused", {
        name,
        token,
        fence: holder.fence,
        holder: holderDetail,
        outcome: "releasing",
        releaseWindowMs,
      });
      return { status: "releasing", holder, releaseWindowMs, auditId };
    }
    const auditId = await audit("refused", {
      name,
      token,
      currentToken,
      fence: holder.fence,
      holder: holderDetail,
      outcome: "not-owner",
    });
    return { status: "not-owner", currentToken, holder, auditId };
  }
  throw unexpectedReply("force-release", reply);
}
