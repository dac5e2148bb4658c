/**
 * The record of a job's attempt that never ran: the job was removed while it waited (an
 * operator's cancel), or the queue gave it up at a pickup, before any processor saw it (BullMQ's
 * stall limit: its pickups were lost too often; its start limit). The attempt it would have been,
 * begun and ended in one write (RUN_BEGIN), which also closes a previous attempt still recorded in
 * flight and drops the job's "waiting trigger" marker, so the next Rebuild now queues a new job.
 */
import os from "node:os";
import type { Job } from "bullmq";
import { rebuildJobData } from "./queue";
import { runPlaceOf, type PublishProof } from "../runs/records";
import type { FinalRunStatus } from "../runs/transitions";
import { runIdOf } from "../runs/types";
import { beginAttempt, type BeginResult, type RunStore } from "../runs/writer";

export interface UnrunAttempt {
  /** Its attempt number (BullMQ's `attemptsStarted`, counted by the pickup that gave it up, or the next one). */
  attempt: number;
  status: FinalRunStatus;
  reason: string;
  /** Who writes it: a worker (the queue gave the job up in its pickup), or "" (a tool). */
  workerId?: string;
  /** Whether an earlier attempt this record closes published (AttemptIdentity.publishProof). */
  publishProof?: (runId: string) => Promise<PublishProof>;
}

/** Records `job`'s attempt that never ran; resolves to its run id and what RUN_BEGIN did. */
export async function recordUnrunAttempt(
  store: RunStore,
  job: Pick<Job, "id" | "data" | "timestamp">,
  unrun: UnrunAttempt,
): Promise<{ runId: string; begun: BeginResult }> {
  const jobId = job.id!;
  const attempt = Math.max(1, unrun.attempt);
  const runId = runIdOf(jobId, attempt);
  const raw = (job.data ?? {}) as { rebuild?: unknown; tenant?: unknown; trigger?: unknown };
  const data = rebuildJobData.safeParse(job.data);
  const begun = await beginAttempt(
    store,
    {
      ...runPlaceOf(raw.rebuild, raw.tenant),
      runId,
      jobId,
      attempt,
      previousRunId: attempt > 1 ? runIdOf(jobId, attempt - 1) : null,
      rebuildName: typeof raw.rebuild === "string" ? raw.rebuild.slice(0, 200) : "",
      createdAt: job.timestamp,
      trigger: raw.trigger === "schedule" || raw.trigger === "manual" ? raw.trigger : "api",
      workerId: unrun.workerId ?? "",
      host: os.hostname(),
      ...(data.success && data.data.retryOf ? { retryOf: data.data.retryOf } : {}),
      ...(unrun.publishProof ? { publishProof: unrun.publishProof } : {}),
    },
    {
      mode: { kind: "final", status: unrun.status, reason: unrun.reason },
      ...(data.success && data.data.version ? { fields: { version: data.data.version } } : {}),
      ...(data.success
        ? {
            pendingTrigger: store.keys.pendingTrigger(
              data.data.rebuild,
              data.data.tenant,
              data.data.version,
              data.data.force,
            ),
          }
        : {}),
    },
  );
  return { runId, begun };
}
