/**
 * Shapes shared by the claim operations. Expected outcomes are discriminated unions on `status`.
 */

/** What the caller says about itself when acquiring; host and pid are filled in by `acquireClaim`. */
export interface ClaimMetadata {
  /** Worker process id (`lib/workers/heartbeat`), for stale-holder detection. */
  workerId?: string;
  /**
   * BullMQ job id. A new attempt of the same job id takes the claim over from an earlier
   * attempt (redelivered after its worker died or stalled) instead of waiting for the TTL.
   * Empty: never take over.
   */
  jobId?: string;
  /**
   * Which attempt of `jobId` this is (BullMQ's attemptsStarted, 1 for the first). A takeover
   * goes one way only: an attempt never takes the claim from a later attempt of its own job
   * (the later one carries the request on). Absent: no order is known, any attempt may take over.
   */
  attempt?: number;
  runId?: string;
  /** Rebuild definition id. */
  rebuild?: string;
  tenant?: string;
  /** claimwatch version of the holder. */
  version?: string;
  /**
   * How long after it notices the loss of the claim this holder's work is certainly stopped
   * (its steps' `killGrace` and a margin). An operator's force release keeps everyone else out
   * this much longer than the claim's remaining TTL, unless the holder acknowledges sooner.
   */
  stopWithinMs?: number;
  /**
   * Keep this claim's trail (lib/claims/trail.ts): acquired, refreshed late, released, expired…
   * Default true; housekeeping claims (pruning builds, alert evaluation) say false.
   */
  trail?: boolean;
}

/** The holder of a claim as stored in its metadata hash; `null` where a field is absent. */
export interface ClaimHolder {
  host: string | null;
  pid: number | null;
  workerId: string | null;
  jobId: string | null;
  /** Which attempt of `jobId` holds it (`ClaimMetadata.attempt`); null when it did not say. */
  attempt: number | null;
  runId: string | null;
  rebuild: string | null;
  tenant: string | null;
  version: string | null;
  fence: number | null;
  ttlMs: number | null;
  refreshEveryMs: number | null;
  /** Claims-server time, ms since epoch. */
  acquiredAt: number | null;
  /** Claims-server time of the last successful refresh (or the grant), ms since epoch. */
  refreshedAt: number | null;
  /** What the holder declared as its stop time (`ClaimMetadata.stopWithinMs`). */
  stopWithinMs: number | null;
  /** Set while an operator's force release waits for this holder to stop: who released it. */
  revokedBy: string | null;
  /** Claims-server time of that force release. */
  revokedAt: number | null;
}

export interface ClaimTiming {
  /** Lifetime of the claim without a refresh. */
  ttlMs: number;
  /** Refresh cadence; at most `ttlMs / 2`, so one failed refresh does not lose the claim. */
  refreshEveryMs: number;
}

export type AcquireResult =
  | {
      status: "acquired";
      /** `host:pid:random`; proves ownership to refresh and release. */
      token: string;
      /** Fencing token: higher than every earlier grant of this name. */
      fence: number;
      acquiredAt: number;
      /** Set when this grant took the claim over from an earlier attempt of the same job id. */
      tookOverFrom: { token: string; fence: number | null } | null;
    }
  | {
      status: "held";
      holder: ClaimHolder;
      /** Holder's claimwatch version (also in `holder`). */
      version: string | null;
      /** Remaining lifetime of the holder's claim. */
      pttlMs: number;
      ttlMs: number | null;
    };

export type RefreshResult =
  | { status: "refreshed" }
  | { status: "missing" }
  | { status: "not-owner" }
  /** An operator force-released the claim: stop the work, then release (which acknowledges). */
  | { status: "revoked" };

export type ReleaseResult =
  | { status: "released" }
  /** The claim had been force-released; this release acknowledged it: the holder has stopped. */
  | { status: "acknowledged" }
  | { status: "missing" }
  | { status: "not-owner" };
