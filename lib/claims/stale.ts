/** Staleness in words and in time, for the Claims page and the banner. */
import type { ClaimInfo, StaleReason } from "./list";

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
 * Since when a claim counts as stale (claims-server ms), or null: two refresh intervals after
 * its last refresh; for a holder without heartbeat, its last refresh.
 */
export function staleSince(claim: Pick<ClaimInfo, "stale" | "holder">): number | null {
  if (claim.stale.length === 0) return null;
  const { refreshedAt, refreshEveryMs, acquiredAt } = claim.holder;
  if (claim.stale.some((r) => r.kind === "refresh-overdue") && refreshedAt !== null && refreshEveryMs !== null) {
    return refreshedAt + 2 * refreshEveryMs;
  }
  return refreshedAt ?? acquiredAt;
}
