/**
 * The one decision of what a run of (rebuild, tenant, version) does now: skip it (already
 * rebuilt, or the same version is being built), wait for another version's holder, take the
 * claim over from an earlier attempt of the same job (or end, when a later one holds it), or build. The worker decides with it on
 * what its scripts saw (the attempt's first record write, the claim acquire); the "Rebuild
 * now" preview decides with it on what it reads. Neither words the rules again.
 */
import type { ClaimHolder } from "../claims";

/** How long a deferred job waits before looking at the claim again: the holder's TTL, within these bounds. */
export const DEFER_MIN_MS = 1_000;
export const DEFER_MAX_MS = 30_000;

export interface RunSituation {
  version: string;
  /** Skip the already-rebuilt rule (never the claim). */
  force: boolean;
  /** The run that rebuilt this version within the idempotency TTL, if any. */
  rebuiltBy: string | null;
  /** The claim on the output, if held. */
  claim: {
    holder: Pick<ClaimHolder, "version" | "jobId" | "workerId" | "host"> &
      Partial<Pick<ClaimHolder, "revokedAt" | "attempt">>;
    pttlMs: number;
    /**
     * False: the holder carries no request on — its job is not being worked (no BullMQ lock), or
     * an earlier run of its job published this version already, so it may end without publishing
     * (run-rebuild.ts `onHeld`).
     */
    jobWorked?: boolean;
    /** An operator asked to cancel the holder's job: it ends without building (lib/rebuilds/queue.ts `holderJobState`). */
    cancelling?: boolean;
  } | null;
  /** The deciding job's id (the preview has none). */
  jobId?: string;
  /** Which attempt of that job decides (BullMQ's attemptsStarted). */
  attempt?: number;
}

export type RunDecision =
  | { action: "skip"; reason: "already-rebuilt"; rebuiltBy: string }
  | { action: "skip"; reason: "claim-held"; heldBy: string; pttlMs: number }
  | {
      action: "defer";
      heldBy: string;
      heldVersion: string | null;
      pttlMs: number;
      waitMs: number;
      /** The holder was force-released and is stopping: the name is free when it has. */
      releasing?: true;
      /** The holder's job is being cancelled: it builds nothing, so this request waits for it to end. */
      cancelling?: true;
    }
  | { action: "take-over"; heldBy: string }
  /** A later attempt of the deciding job holds the claim: it carries the request on, this one ends. */
  | { action: "superseded"; heldBy: string }
  | { action: "build" };

export function decideRun(situation: RunSituation): RunDecision {
  if (!situation.force && situation.rebuiltBy) {
    return { action: "skip", reason: "already-rebuilt", rebuiltBy: situation.rebuiltBy };
  }
  const { claim } = situation;
  if (!claim) return { action: "build" };
  const heldBy = claim.holder.workerId ?? claim.holder.host ?? "another worker";
  const defer = {
    action: "defer" as const,
    heldBy,
    heldVersion: claim.holder.version,
    pttlMs: claim.pttlMs,
    waitMs: Math.max(DEFER_MIN_MS, Math.min(DEFER_MAX_MS, claim.pttlMs + 100)),
  };
  // Force-released and still stopping: it will publish nothing and carries no request on (not
  // even for its own job's next attempt, which the acquire script refuses a takeover), so wait.
  if (claim.holder.revokedAt) return { ...defer, releasing: true };
  if (situation.jobId && claim.holder.jobId === situation.jobId) {
    // Takeovers go one way (the acquire script refuses the other): never from a later attempt.
    const later = claim.holder.attempt && situation.attempt && claim.holder.attempt > situation.attempt;
    return { action: later ? "superseded" : "take-over", heldBy };
  }
  if (claim.holder.version === situation.version) {
    // Its job being cancelled, it builds nothing: wait for it to end, then build.
    if (claim.cancelling) return { ...defer, cancelling: true };
    // The holder builds this version and its job is being worked: it carries this request.
    if (claim.jobWorked !== false) return { action: "skip", reason: "claim-held", heldBy, pttlMs: claim.pttlMs };
  }
  return defer;
}
