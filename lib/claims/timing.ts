/** Validation of a claim's TTL and refresh cadence (programming errors, so they throw). */
import type { ClaimTiming } from "./types";

export function assertClaimTiming({ ttlMs, refreshEveryMs }: ClaimTiming): void {
  if (!Number.isSafeInteger(ttlMs) || ttlMs <= 0) {
    throw new RangeError(`ttlMs must be a positive whole number of milliseconds (got ${ttlMs})`);
  }
  if (!Number.isSafeInteger(refreshEveryMs) || refreshEveryMs <= 0) {
    throw new RangeError(`refreshEveryMs must be a positive whole number of milliseconds (got ${refreshEveryMs})`);
  }
  // Two refresh chances per TTL: one slow or failed refresh must not lose the claim.
  if (refreshEveryMs > ttlMs / 2) {
    throw new RangeError(`refreshEveryMs (${refreshEveryMs}) must be at most ttlMs / 2 (${ttlMs / 2})`);
  }
}
