/**
 * What the live stream carries. Every event says what changed, with enough data for the
 * dashboard to update its cache without asking the API again (claims, run records), or names
 * what to re-read (a run's log). `at` is the Redis server's time of the change (the stream entry
 * id's milliseconds): one clock for every process.
 */
import type { HealthReport } from "../health/health";
import type { RunRecord } from "../runs/types";

export interface ClaimSnapshot {
  name: string;
  token: string;
  fence: number;
  acquiredAt: number;
  ttlMs: number;
  refreshEveryMs: number;
  rebuild: string | null;
  tenant: string | null;
  version: string | null;
  holder: { host: string; pid: number; workerId: string | null; jobId: string | null; runId: string | null };
}

/** Events written to a Redis stream (by the process that made the change). */
export type StoredEvent =
  | ({ type: "claim.acquired"; tookOverFrom: { token: string; fence: number | null } | null } & ClaimSnapshot)
  | { type: "claim.refreshed"; name: string; token: string; ttlMs: number }
  | { type: "claim.released"; name: string; token: string; forcedBy: string | null }
  /**
   * An operator force-released the claim: its holder is told to stop, and the name stays taken
   * until the holder acknowledges (`claim.released`) or `windowMs` ends (`claim.expired`).
   */
  | { type: "claim.revoked"; name: string; token: string; by: string; windowMs: number }
  /** The holder found it lost its claim (paused past the TTL, taken over, cut off). */
  | { type: "claim.lost"; name: string; token: string; cause: string }
  | { type: "run"; run: Pick<RunRecord, "id" | "rebuild" | "tenant"> & Partial<RunRecord> }
  /** New log lines of a run were written (re-read them if the run is on screen). */
  | { type: "run.log"; id: string }
  | { type: "run.queued"; jobId: string; rebuild: string; tenant: string | null }
  /** An operator paused or resumed a schedule (`tenant` null: every tenant's, or none). */
  | { type: "schedule.paused" | "schedule.resumed"; rebuild: string; tenant: string | null }
  | { type: "worker.up"; id: string; host: string; pid: number }
  | { type: "worker.down"; id: string };

/**
 * Events a web server derives itself and sends only to its own clients (not stored): a claim
 * whose TTL ran out with nobody releasing it, and a changed health report (which must reach
 * the browser even when Redis is down).
 */
export type LocalEvent =
  { type: "claim.expired"; name: string; token: string } | { type: "health"; report: HealthReport };

export type ClaimwatchEvent = StoredEvent | LocalEvent;

/** An event as it reaches a browser: `at` is Redis time (ms) for stored events, server time else. */
export type DeliveredEvent = ClaimwatchEvent & { at: number };

/** Which stream an event was stored in. */
export type StreamName = "main" | "claims";

/** The SSE event that ends a stream whose caller's session ended (lib/events/sse.ts). */
export const UNAUTHENTICATED_EVENT = "unauthenticated";
