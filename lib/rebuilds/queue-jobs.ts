/**
 * What waits in the rebuild queue, read-only: waiting, delayed (with the next attempt time and
 * why — a retry's backoff, a deferral behind another version's claim, or a delay given when
 * queued), active and recently failed jobs, per rebuild and tenant. BullMQ owns these keys; the
 * next attempt time is the score of the job in BullMQ's delayed set (ms · 0x1000 + a counter).
 */
import type { Job, Queue } from "bullmq";
import type { Redis } from "ioredis";
import type { RedisKeys } from "../redis/keys";
import { listRuns } from "../runs/list";
import { rebuildJobData } from "./queue";

export const QUEUE_STATES = ["active", "waiting", "delayed", "failed"] as const;
export type QueueState = (typeof QUEUE_STATES)[number];

export interface QueuedJob {
  id: string;
  state: QueueState;
  rebuild: string;
  tenant: string | null;
  version: string | null;
  force: boolean;
  trigger: string;
  requestedBy: string | null;
  /** When the job was added (ms). */
  queuedAt: number;
  /** Attempts that ended (failed) so far. */
  attemptsMade: number;
  attempts: number;
  /** Delayed jobs: when BullMQ moves it back to waiting (ms); null otherwise. */
  nextAttemptAt: number | null;
  /** Delayed jobs: why it waits; failed jobs: why it failed. */
  why: string | null;
  startedAt: number | null;
  finishedAt: number | null;
}

export interface QueueListing {
  jobs: QueuedJob[];
  /** Jobs per state in the whole queue (every rebuild), as BullMQ counts them. */
  counts: Record<QueueState, number>;
}

export interface QueueFilter {
  rebuild?: string;
  tenant?: string;
  /** At most this many jobs per state (newest failed first, next waiting first). */
  limit: number;
}

/** How many jobs per state are read before filtering by rebuild and tenant. */
const SCAN_PER_STATE = 1_000;
const DELAYED_SCORE_FACTOR = 0x1000;

export async function listQueueJobs(
  queue: Pick<Queue, "getJobs" | "getJobCounts" | "keys">,
  client: Pick<Redis, "zscore" | "zrevrangebyscore" | "pipeline">,
  keys: RedisKeys,
  filter: QueueFilter,
): Promise<QueueListing> {
  const counted = await queue.getJobCounts(...QUEUE_STATES, "prioritized");
  const counts = Object.fromEntries(
    QUEUE_STATES.map((state) => [
      state,
      (counted[state] ?? 0) + (state === "waiting" ? (counted.prioritized ?? 0) : 0),
    ]),
  ) as Record<QueueState, number>;
  const jobs: QueuedJob[] = [];
  for (const state of QUEUE_STATES) {
    const types = state === "waiting" ? (["waiting", "prioritized"] as const) : ([state] as const);
    // Failed: the newest first; the others: in the order they will run.
    const found = (await queue.getJobs([...types], 0, SCAN_PER_STATE - 1, state !== "failed")) as Job[];
    const matching = found
      .map((job) => toQueuedJob(job, state))
      .filter((job): job is QueuedJob => job !== null)
      .filter(
        (job) =>
          (!filter.rebuild || job.rebuild === filter.rebuild) && (!filter.tenant || job.tenant === filter.tenant),
      )
      .slice(0, filter.limit);
    if (state === "delayed") await explainDelays(matching, queue, client, keys);
    jobs.push(...matching);
  }
  return { jobs, counts };
}

function toQueuedJob(job: Job | undefined, state: QueueState): QueuedJob | null {
  if (!job?.id) return null;
  const parsed = rebuildJobData.safeParse(job.data);
  if (!parsed.success) return null; // not a rebuild job (nothing else is queued here)
  const data = parsed.data;
  return {
    id: job.id,
    state,
    rebuild: data.rebuild,
    tenant: data.tenant ?? null,
    version: data.version ?? null,
    force: data.force,
    trigger: data.trigger,
    requestedBy: data.requestedBy ?? null,
    queuedAt: job.timestamp,
    attemptsMade: job.attemptsMade,
    attempts: job.opts.attempts ?? 1,
    nextAttemptAt: null,
    why: state === "failed" ? job.failedReason || null : null,
    startedAt: job.processedOn ?? null,
    finishedAt: job.finishedOn ?? null,
  };
}

/**
 * A delayed job waits after a failed attempt (backoff: BullMQ kept its `failedReason`), after a
 * deferral (the worker moved it: its last run record says behind which claim), or because it was
 * queued with a delay.
 */
async function explainDelays(
  jobs: QueuedJob[],
  queue: Pick<Queue, "keys">,
  client: Pick<Redis, "zscore" | "zrevrangebyscore" | "pipeline">,
  keys: RedisKeys,
): Promise<void> {
  if (jobs.length === 0) return;
  const pipeline = client.pipeline();
  for (const job of jobs) pipeline.zscore(queue.keys.delayed!, job.id);
  const scores = (await pipeline.exec()) ?? [];
  await Promise.all(
    jobs.map(async (job, i) => {
      const score = Number(scores[i]?.[1]);
      job.nextAttemptAt = Number.isFinite(score) && score > 0 ? Math.floor(score / DELAYED_SCORE_FACTOR) : null;
      const [lastRun] = (await listRuns(client, keys, { jobId: job.id }, 1)).runs;
      if (lastRun?.status === "deferred") job.why = `deferred: ${lastRun.reason ?? "another version holds the output"}`;
      else if (lastRun?.status === "failed" || job.attemptsMade > 0) {
        job.why = `backoff after attempt ${job.attemptsMade} failed${lastRun?.reason ? `: ${lastRun.reason}` : ""}`;
      } else job.why = "delayed when queued";
    }),
  );
}
