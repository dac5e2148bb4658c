/**
 * What waits, what runs and what recently failed in the rebuild queue, per rebuild and tenant,
 * with the reason a delayed job waits: a retry's backoff (its last attempt's error), a deferral
 * behind another version's claim (the deferred run record's note names the claim, the holder and
 * the version it builds), or a schedule's next tick. Bounded: at most `PER_STATE` jobs of each
 * state are read (newest failed first), then filtered; the counts are the whole queue's.
 */
import type { Job, Queue } from "bullmq";
import type { Redis } from "ioredis";
import { parseCancelRequest, type CancelRequest } from "../rebuilds/cancel-request";
import { parseDeferNote, type DeferNote } from "../rebuilds/defer-note";
import { rebuildJobData, scheduledTickOf } from "../rebuilds/queue";
import type { RedisKeys } from "../redis/keys";
import { runIdOf, type RunStatus } from "../runs/types";

export const QUEUE_VIEW_STATES = ["active", "waiting", "prioritized", "delayed", "failed"] as const;
export type QueueViewState = (typeof QUEUE_VIEW_STATES)[number];
/**
 * A listed job's state: BullMQ's, except that a job an operator cancelled (it ends in BullMQ's
 * failed set) is `cancelled`, not `failed`, wherever the queue is shown (page, API, CLI).
 */
export type QueueEntryState = QueueViewState | "cancelled";

/** Jobs read per state; failed: the newest this many. */
const PER_STATE = 200;
const RECENT_FAILED = 25;
/** Replies per listed job in the lookup pipeline: run id, cancel request, delayed score, defer note. */
const PER_JOB = 4;

export type WaitReason =
  /** A failed attempt; the next one after the backoff. */
  | { kind: "backoff"; detail: string }
  /**
   * Deferred: another version holds the output's claim (the deferred run's note: claim, holder,
   * version; `runId` is that run), or another pickup has the attempt's record (the worker's defer
   * note; no run of its own, `runId` null).
   */
  | { kind: "deferred"; detail: string; runId: string | null }
  /** A schedule's next tick (not a run yet; pause the schedule to stop it). */
  | { kind: "scheduled-tick"; detail: string }
  /** Waiting for a free worker (new, or handed back by a worker that stopped). */
  | { kind: "queued"; detail: string };

export interface QueueEntry {
  jobId: string;
  state: QueueEntryState;
  rebuild: string | null;
  tenant: string | null;
  version: string | null;
  force: boolean;
  trigger: string | null;
  requestedBy: string | null;
  retryOf: string | null;
  createdAt: number;
  attemptsStarted: number;
  attemptsMade: number;
  /** Configured attempts (retries + 1). */
  attempts: number;
  /** Delayed jobs: when BullMQ moves it back to waiting (ms). */
  nextAttemptAt: number | null;
  waitReason: WaitReason | null;
  /** The newest attempt's run record (the one running, for an active job). */
  lastRun: { id: string; status: RunStatus; reason: string | null } | null;
  /** Failed jobs: BullMQ's reason and when. */
  failedReason: string | null;
  finishedAt: number | null;
  /** An operator asked to cancel it (active jobs show this until their worker stops them). */
  cancelRequested: CancelRequest | null;
}

export interface QueueView {
  jobs: QueueEntry[];
  /** Whole-queue counts by state (not filtered). */
  counts: Record<QueueViewState, number>;
  serverTime: number;
}

export interface QueueFilter {
  rebuild?: string;
  tenant?: string;
}

export async function readQueueView(
  queue: Pick<Queue, "getJobs" | "getJobCounts" | "keys">,
  main: Pick<Redis, "pipeline" | "time">,
  keys: RedisKeys,
  filter: QueueFilter = {},
): Promise<QueueView> {
  const [active, waiting, delayed, failed, counts, time] = await Promise.all([
    queue.getJobs(["active"], 0, PER_STATE - 1),
    queue.getJobs(["waiting", "prioritized"], 0, PER_STATE - 1, true),
    queue.getJobs(["delayed"], 0, PER_STATE - 1, true),
    queue.getJobs(["failed"], 0, RECENT_FAILED - 1, false),
    queue.getJobCounts(...QUEUE_VIEW_STATES),
    main.time(),
  ]);
  const listed: { job: Job; state: QueueViewState }[] = [];
  const add = (jobs: (Job | undefined)[], state: (job: Job) => QueueViewState) => {
    for (const job of jobs) if (job?.id && matches(job, filter)) listed.push({ job, state: state(job) });
  };
  add(active as Job[], () => "active");
  add(waiting as Job[], (job) => (job.priority > 0 ? "prioritized" : "waiting"));
  add(delayed as Job[], () => "delayed");
  add(failed as Job[], () => "failed");

  // One pipeline: each job's newest run (its status and note), cancel request, and for delayed
  // jobs the delayed ZSET score, which is when it runs: BullMQ scores it (timestamp << 12) + seq.
  const pipeline = main.pipeline();
  const lastRunIds = listed.map(({ job, state }) =>
    state === "active" ? null : job.attemptsStarted > 0 ? runIdOf(job.id!, job.attemptsStarted) : null,
  );
  listed.forEach(({ job, state }, i) => {
    if (state === "active") pipeline.get(keys.runOpenAttempt(job.id!));
    else pipeline.echo(lastRunIds[i] ?? "");
    pipeline.get(keys.cancelRequest(job.id!));
    if (state === "delayed") pipeline.zscore(queue.keys.delayed!, job.id!);
    else pipeline.echo("");
    if (state === "delayed") pipeline.get(keys.deferNote(job.id!));
    else pipeline.echo("");
  });
  const replies = listed.length ? ((await pipeline.exec()) ?? []) : [];
  const runIds = listed.map((_, i) => (replies[i * PER_JOB]?.[1] as string | null) || null);
  const runs = main.pipeline();
  for (const id of runIds) runs.hmget(keys.run(id ?? "-"), "status", "reason");
  const runReplies = listed.length ? ((await runs.exec()) ?? []) : [];

  const jobs = listed.map(({ job, state }, i): QueueEntry => {
    const data = rebuildJobData.safeParse(job.data);
    const [status, reason] = (runReplies[i]?.[1] as (string | null)[] | undefined) ?? [];
    const lastRun =
      runIds[i] && status ? { id: runIds[i]!, status: status as RunStatus, reason: reason || null } : null;
    const score = Number((replies[i * PER_JOB + 2]?.[1] as string | null) || NaN);
    const nextAttemptAt = state === "delayed" && Number.isFinite(score) ? Math.floor(score / 0x1000) : null;
    const note = parseDeferNote(replies[i * PER_JOB + 3]?.[1] as string | null);
    // The note belongs to the delay it was written with (moveToDelayed to its `until`).
    const deferNote = note && nextAttemptAt !== null && Math.abs(note.until - nextAttemptAt) <= 1 ? note : null;
    const cancelled =
      state === "failed" && (lastRun?.status === "cancelled" || /^cancelled by /.test(job.failedReason ?? ""));
    return {
      jobId: job.id!,
      state: cancelled ? "cancelled" : state,
      rebuild: data.success ? data.data.rebuild : null,
      tenant: data.success ? (data.data.tenant ?? null) : null,
      version: data.success ? (data.data.version ?? null) : null,
      force: data.success ? data.data.force : false,
      trigger: data.success ? data.data.trigger : null,
      requestedBy: data.success ? (data.data.requestedBy ?? null) : null,
      retryOf: data.success ? (data.data.retryOf ?? null) : null,
      createdAt: job.timestamp,
      attemptsStarted: job.attemptsStarted,
      attemptsMade: job.attemptsMade,
      attempts: job.opts.attempts ?? 1,
      nextAttemptAt,
      waitReason: waitReasonOf(job, state, lastRun, deferNote),
      lastRun,
      failedReason: state === "failed" ? job.failedReason || null : null,
      finishedAt: state === "failed" ? (job.finishedOn ?? null) : null,
      cancelRequested: parseCancelRequest(replies[i * PER_JOB + 1]?.[1] as string | null),
    };
  });
  const [seconds, micros] = time;
  return {
    jobs,
    counts: Object.fromEntries(QUEUE_VIEW_STATES.map((s) => [s, counts[s] ?? 0])) as Record<QueueViewState, number>,
    serverTime: Number(seconds) * 1000 + Math.floor(Number(micros) / 1000),
  };
}

function matches(job: Job, filter: QueueFilter): boolean {
  if (!filter.rebuild) return true;
  const data = job.data as { rebuild?: unknown; tenant?: unknown } | undefined;
  if (data?.rebuild !== filter.rebuild) return false;
  return !filter.tenant || data.tenant === filter.tenant;
}

function waitReasonOf(
  job: Job,
  state: QueueViewState,
  lastRun: QueueEntry["lastRun"],
  deferNote: DeferNote | null,
): WaitReason | null {
  if (state === "active" || state === "failed") return null;
  if (deferNote) return { kind: "deferred", detail: deferNote.reason, runId: null };
  if (lastRun?.status === "deferred") {
    return { kind: "deferred", detail: lastRun.reason ?? "another version holds the output", runId: lastRun.id };
  }
  if (state === "delayed" && scheduledTickOf(job.id) && job.attemptsStarted === 0) {
    return { kind: "scheduled-tick", detail: "the schedule's next tick" };
  }
  if (state === "delayed" && job.attemptsMade > 0) {
    const attempts = job.opts.attempts ?? 1;
    return {
      kind: "backoff",
      detail: `attempt ${job.attemptsMade} of ${attempts} failed${job.failedReason ? `: ${job.failedReason}` : ""}; retrying after the backoff`,
    };
  }
  if (lastRun?.status === "aborted")
    return { kind: "queued", detail: `waits for a worker (${lastRun.reason ?? "handed back"})` };
  return { kind: "queued", detail: state === "delayed" ? "delayed when queued" : "waits for a free worker" };
}
