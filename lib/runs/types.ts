/** Run records: one per attempt of a rebuild job, upserted by run id. */
export const RUN_STATUSES = [
  "queued",
  "running",
  "rebuilt",
  "skipped",
  "failed",
  "aborted",
  "superseded",
  /** The attempt found another version building the output and gave the job back to wait. */
  "deferred",
  /** An operator cancelled the job (running or waiting); it is not retried. */
  "cancelled",
] as const;
export type RunStatus = (typeof RUN_STATUSES)[number];

export type RunTrigger = "schedule" | "manual" | "api";

export interface StepRecord {
  name: string;
  status: "running" | "done" | "failed" | "aborted";
  startedAt: number;
  finishedAt: number | null;
}

export interface RunRecord {
  id: string;
  jobId: string;
  attempt: number;
  rebuild: string;
  tenant: string | null;
  version: string | null;
  status: RunStatus;
  reason: string | null;
  trigger: RunTrigger;
  workerId: string | null;
  host: string | null;
  createdAt: number;
  startedAt: number | null;
  finishedAt: number | null;
  durationMs: number | null;
  fence: number | null;
  buildHash: string | null;
  idempotencyKey: string | null;
  progress: number;
  steps: StepRecord[];
  /** The run an operator retried with this job (Retry: same rebuild, tenant and version, forced). */
  retryOf?: string | null;
  /**
   * Its build became `current` after the record had ended without saying so (its publish was in
   * the claims Redis, its fence record refused by a full disk, and repair finished it once the disk
   * took it): when, with which fence and build. The status stays what the attempt recorded.
   */
  madeCurrentLater?: { fence: number; buildHash: string; at: number } | null;
  /**
   * When someone else than its attempt closed it (the sweep, the job's next attempt; Redis clock):
   * its `finishedAt` is when it was last seen running, which may be earlier.
   */
  closedAt?: number;
  /**
   * "<fence> <build hash>": written by the attempt's owner check right before its publish
   * (records.ts PUBLISHING_FIELD); not read back into a record (the live event of that write
   * carries it, harmlessly).
   */
  publishing?: string;
  /**
   * "by <actor>: “<reason>”; audit entry <id>": an operator force-released the attempt's claim
   * while it ran (records.ts FORCE_RELEASED_FIELD); named in the reason of a record someone else
   * closes for it (the next attempt, the sweep). Not read back into a record.
   */
  forceReleasedBy?: string;
}

/** Run id: job id + attempt, made safe for keys and URLs (scheduler job ids contain ':'). */
export function runIdOf(jobId: string, attempt: number): string {
  return `${jobId.replace(/[^A-Za-z0-9_.-]/g, "_")}-a${attempt}`;
}

export const RUN_ID_PATTERN = /^[A-Za-z0-9_.-]{1,200}-a\d{1,4}$/;

/** The job part of a run id (`runIdOf` without its `-a<attempt>`). */
export function jobPartOf(runId: string): string {
  return runId.replace(/-a\d+$/, "");
}

/** The attempt number of a run id (0 when it has none). */
export function attemptOfRunId(runId: string): number {
  return Number(/-a(\d+)$/.exec(runId)?.[1] ?? 0);
}
