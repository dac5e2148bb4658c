/** Staleness in words and in time, for the Claims page and the banner. */
import type { ClaimInfo, StaleReason } from "./list";
import type { ClaimHolder } from "./types";

export function describeStale(reasons: readonly StaleReason[]): string | null {
  if (reasons.length === 0) return null;
  return reasons
    .map((reason) =>
      reason.kind === "refresh-overdue"
        ? `no refresh for ${Math.round(reason.sinceRefreshMs / 1000)} s (refreshes every ${Math.round(reason.refreshEveryMs / 1000)} s)`
        : `holder ${reason.workerId} has no live heartbeat`,
    )
    .join("; ");
}

/**
 * Refresh intervals without a refresh after which a claim is stale. CLAIM_STALE_CENSUS gets it
 * as an argument, so its pre-filter stays a superset of `staleReasons`.
 */
export const STALE_AFTER_REFRESHES = 2;

/**
 * Since when a claim counts as stale (claims-server ms), or null: two refresh intervals after
 * its last refresh; for a holder without heartbeat, its last refresh.
 */
export function staleSince(claim: {
  stale: ClaimInfo["stale"];
  holder: Pick<ClaimHolder, "refreshedAt" | "refreshEveryMs" | "acquiredAt">;
}): number | null {
  if (claim.stale.length === 0) return null;
  const { refreshedAt, refreshEveryMs, acquiredAt } = claim.holder;
  if (claim.stale.some((r) => r.kind === "refresh-overdue") && refreshedAt !== null && refreshEveryMs !== null) {
    return refreshedAt + STALE_AFTER_REFRESHES * refreshEveryMs;
  }
  return refreshedAt ?? acquiredAt;
}

/**
 * A claim is stale when its last refresh is older than two refresh intervals (the holder is
 * stuck or gone; it will expire within its TTL), or when its holder worker has no live heartbeat.
 */
export function staleReasons(
  holder: Pick<ClaimHolder, "refreshedAt" | "refreshEveryMs" | "workerId">,
  serverTime: number,
  liveWorkerIds: ReadonlySet<string> | undefined,
): StaleReason[] {
  const reasons: StaleReason[] = [];
  const { refreshedAt, refreshEveryMs, workerId } = holder;
  if (refreshedAt !== null && refreshEveryMs !== null && refreshEveryMs > 0) {
    const sinceRefreshMs = serverTime - refreshedAt;
    if (sinceRefreshMs > STALE_AFTER_REFRESHES * refreshEveryMs)
      reasons.push({ kind: "refresh-overdue", sinceRefreshMs, refreshEveryMs });
  }
  if (liveWorkerIds && workerId && !liveWorkerIds.has(workerId)) reasons.push({ kind: "holder-not-live", workerId });
  return reasons;
}

/**
 * A claim's staleness as a page shows it at `serverNow`, between reads: "no refresh for N s"
 * counts up on the server's clock by the server's rule; the holder's heartbeat as the server last
 * read it (`holderNotLive`); the server's reason when the page cannot tell more (a claim whose
 * refresh time it does not know).
 */
export function staleNow(
  claim: {
    stale: boolean;
    staleReason: string | null;
    holderNotLive: boolean;
    refreshedAt: number | null;
    refreshEveryMs: number | null;
    holder: { workerId: string | null };
  },
  serverNow: number,
): { stale: boolean; reason: string | null } {
  const reasons = staleReasons({ ...claim, workerId: null }, serverNow, undefined);
  if (claim.holderNotLive && claim.holder.workerId)
    reasons.push({ kind: "holder-not-live", workerId: claim.holder.workerId });
  return { stale: claim.stale || reasons.length > 0, reason: describeStale(reasons) ?? claim.staleReason };
}
