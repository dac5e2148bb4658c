/**
 * The rebuild queue as both sides see it: the web server adds jobs, workers process them.
 * BullMQ keys share claimwatch's hash tag (`{prefix}:rebuilds:*`), which keeps them in one slot
 * on Redis Cluster and lets one prefix isolate a test.
 */
import crypto from "node:crypto";
import type { Job, JobsOptions } from "bullmq";
import type { Redis } from "ioredis";
import { z } from "zod";
import type { RedisKeys } from "../redis/keys";
import { runScript, type ScriptingClient } from "../redis/scripts";
import { replyCode } from "../redis/replies";
import { UNCOUNT_UNSTARTED } from "./scripts";
import { DEFAULT_RETENTION_CONFIG, type Definitions, type RebuildDefinition, type Retention } from "./definitions";
import { VERSION_PATTERN } from "./version";

export const REBUILD_QUEUE = "rebuilds";
export const BACKOFF_TYPE = "capped-exponential";

export function queuePrefix(keys: RedisKeys): string {
  return keys.tag;
}

/** BullMQ's hash of a job (`<prefix>:<queue>:<id>`); its `ats` field counts the attempts started. */
export function jobKey(keys: RedisKeys, jobId: string): string {
  return `${queuePrefix(keys)}:${REBUILD_QUEUE}:${jobId}`;
}

/** BullMQ's lock of an active job (`<job key>:lock`): it exists while a worker works it. */
export function jobLockKey(keys: RedisKeys, jobId: string): string {
  return `${jobKey(keys, jobId)}:lock`;
}

/**
 * Whether a claim holder's attempt carries other jobs' requests for its version: `worked` — its job
 * is working it now (the job's lock exists and the attempts it started, `ats`, are the holder's:
 * a later attempt may be completing already); `cancelling` — an operator asked to cancel its job,
 * so it ends without building (README: a trigger that arrives while a job is being cancelled gets a
 * job of its own; black-box helper-174 saw it skipped behind the cancelled one and lost). A
 * same-version holder carries another job's request only when worked and not cancelling
 * (lib/rebuilds/decide.ts). A holder without a job (a test's, an earlier version's) counts as
 * worked; a failed read does not (waiting costs one pickup; trusting a finished attempt can lose
 * the request).
 */
export async function holderJobState(
  client: Pick<Redis, "pipeline">,
  keys: RedisKeys,
  holder: { jobId?: string | null; attempt?: number | null | undefined },
): Promise<{ worked: boolean; cancelling: boolean }> {
  if (!holder.jobId) return { worked: true, cancelling: false };
  try {
    const replies = await client
      .pipeline()
      .exists(jobLockKey(keys, holder.jobId))
      .hget(jobKey(keys, holder.jobId), "ats")
      .exists(keys.cancelRequest(holder.jobId))
      .exec();
    if (!replies || replies.some(([error]) => error)) return { worked: false, cancelling: false };
    const cancelling = replies[2]![1] === 1;
    if (replies[0]![1] !== 1) return { worked: false, cancelling };
    const worked = holder.attempt == null || Math.max(1, Number(replies[1]![1] ?? 0)) === holder.attempt;
    return { worked, cancelling };
  } catch {
    return { worked: false, cancelling: false };
  }
}

export const rebuildJobData = z.strictObject({
  rebuild: z.string(),
  tenant: z.string().optional(),
  version: z.string().regex(VERSION_PATTERN).optional(),
  /** Skip the idempotency check (never the claim). */
  force: z.boolean().default(false),
  trigger: z.enum(["schedule", "manual", "api"]).default("api"),
  requestedBy: z.string().max(200).optional(),
  /** The run an operator retried with this job (lib/operations/retry). */
  retryOf: z.string().max(200).optional(),
});
export type RebuildJobData = z.output<typeof rebuildJobData>;

/**
 * Finished jobs are kept long enough to inspect and never pile up (the seeds' "Redis fills up
 * with stale result keys"): by age and count. The run records are the lasting history.
 */
export function jobRetention(retention: Retention = DEFAULT_RETENTION_CONFIG) {
  return {
    removeOnComplete: { age: 7 * 86_400, count: retention.completedJobs },
    removeOnFail: { age: 30 * 86_400, count: retention.failedJobs },
  };
}

export function jobOptionsFor(definition: RebuildDefinition, retention?: Retention): JobsOptions {
  return {
    attempts: definition.retries.attempts,
    backoff: { type: BACKOFF_TYPE, delay: definition.retries.backoff },
    ...jobRetention(retention),
  };
}

/**
 * BullMQ's exponential backoff has no cap (notes/bullmq.md): delay·2^(n-1), capped at the
 * rebuild's `maxBackoff`. `attemptsMade` counts finished attempts (1 after the first failure).
 */
export function cappedBackoff(attemptsMade: number, delayMs: number, maxMs: number): number {
  const exponent = Math.max(0, Math.min(30, attemptsMade - 1));
  return Math.min(maxMs, delayMs * 2 ** exponent);
}

export function backoffStrategyFor(definitions: Definitions) {
  return (attemptsMade: number, type?: string, _error?: Error, job?: { data?: { rebuild?: string } }): number => {
    const definition = job?.data?.rebuild ? definitions.rebuilds.get(job.data.rebuild) : undefined;
    const delay = definition?.retries.backoff ?? 30_000;
    const max = definition?.retries.maxBackoff ?? 600_000;
    if (type !== BACKOFF_TYPE) return delay;
    return cappedBackoff(attemptsMade, delay, max);
  };
}

/** Scheduler ids: `sched.<rebuild>` or `sched.<rebuild>.<tenant>` ('.' never occurs in names). */
export function schedulerIdOf(rebuild: string, tenant: string | undefined): string {
  return tenant ? `sched.${rebuild}.${tenant}` : `sched.${rebuild}`;
}

/** BullMQ names scheduler jobs `repeat:<schedulerId>:<tick ms>`: the tick time, when this is one. */
export function scheduledTickOf(jobId: string | undefined): { schedulerId: string; tickAt: number } | null {
  const match = /^repeat:(sched\.[^:]+):(\d+)$/.exec(jobId ?? "");
  return match ? { schedulerId: match[1]!, tickAt: Number(match[2]) } : null;
}

/** What became of a job handed back unstarted (`handBackUnstarted`). */
export type HandBackOutcome =
  /** Back in waiting, its fetch's attempt taken back. */
  | { kind: "handed-back" }
  /** Another fetch holds the lock: nothing changed, the job is another's. */
  | { kind: "not-ours" }
  /**
   * No lock is held any more (it ran out, or the job left active meanwhile): nothing changed; a
   * job still active is the stalled check's (back to waiting, or failed past its stall limit).
   */
  | { kind: "lock-gone" }
  /**
   * The attempt was taken back but the move to waiting failed (or its reply was lost: then it
   * may have moved): the job stays active under this worker's lock until the stalled check hands
   * it back. No attempt is counted for this fetch, but the stalled check counts a stall
   * (`maxStalledCount`), as for any job whose worker went away.
   */
  | { kind: "not-moved"; error: string };

/**
 * Hands a job this worker fetched but will not run back to waiting as if it had never been
 * fetched: the attempt BullMQ counted is taken back (UNCOUNT_UNSTARTED, under the job's lock),
 * then the job moves to waiting. `jobKey` is BullMQ's key of the job hash (`worker.toKey(id)`).
 * Throws only when the take-back call failed; if it ran nonetheless (a lost reply), the count
 * is taken back and the stalled check hands the job back once the lock runs out.
 */
export async function handBackUnstarted(
  client: ScriptingClient,
  job: Pick<Job, "moveToWait">,
  jobKey: string,
  token: string,
): Promise<HandBackOutcome> {
  const call = crypto.randomUUID();
  const taken = await runScript(client, UNCOUNT_UNSTARTED, [`${jobKey}:lock`, jobKey], [token, call]);
  const reply = replyCode(UNCOUNT_UNSTARTED.command, taken);
  if (reply === "missing") return { kind: "lock-gone" };
  if (reply !== "done") return { kind: "not-ours" };
  return job.moveToWait(token).then(
    (): HandBackOutcome => ({ kind: "handed-back" }),
    (error: unknown): HandBackOutcome => ({ kind: "not-moved", error: String(error) }),
  );
}
