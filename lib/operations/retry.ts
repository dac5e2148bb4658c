/**
 * An operator retries a run that ended without its result: failed (a time limit too), aborted or
 * cancelled, and was its job's last attempt (an attempt its job went on from — retried by the
 * queue, and maybe rebuilt since — is not retried: that would force a rebuild nobody needs). The retry is a new job of the same rebuild, tenant and version, forced (the
 * idempotency key must not skip it; the claim still applies), whose runs link back to the run
 * retried (`retryOf`). A run without a recorded version (it failed before its inputs were read)
 * is retried with the version of the inputs now. The run remembers the job (`retriedAs`): its page
 * names it, and another Retry while that job has not ended is refused (`already-retried`) — of the
 * same run, or of another attempt of the same job (the job remembers its newest Retry too: an
 * attempt recorded after a Retry of an earlier one, such as the queue giving the job up, would
 * otherwise queue a second forced rebuild). Audited.
 */
import type { Queue } from "bullmq";
import type { Redis } from "ioredis";
import { z } from "zod";
import { appendAudit } from "../audit/append";
import type { Definitions } from "../rebuilds/definitions";
import { triggerRebuild } from "../rebuilds/trigger";
import type { RedisKeys } from "../redis/keys";
import { parseStoredJson } from "../redis/stored-json";
import type { ScriptingClient } from "../redis/scripts";
import { readRun } from "../runs/records";
import { runIdOf } from "../runs/types";
import { RETRYABLE_STATUSES } from "../runs/transitions";
import type { RunRecord, RunStatus } from "../runs/types";

export interface RetryDeps {
  queue: Pick<Queue, "add" | "getJobState" | "getJob">;
  main: ScriptingClient &
    Pick<
      Redis,
      "hgetall" | "lrange" | "set" | "get" | "exists" | "pexpire" | "hset" | "call" | "on" | "multi" | "del" | "decr"
    >;
  keys: RedisKeys;
  definitions: Definitions;
  /** Replicas that must have the retry's job before it is answered queued (`CLAIMWATCH_TRIGGER_REPLICAS`). */
  replicas?: number;
}

export type RetryResult =
  | { status: "queued" | "deduplicated"; runId: string; jobId: string; auditId: string }
  /** Queued on the primary, but fewer replicas than asked have it: send the retry again (lib/rebuilds/trigger). */
  | { status: "not-replicated"; runId: string; jobId: string; message: string; auditId: string }
  | { status: "not-found"; runId: string }
  /** The run is not failed, aborted or cancelled (still running, or it did its work). */
  | { status: "not-retryable"; runId: string; runStatus: RunStatus; auditId: string }
  /**
   * Its job is still in the queue (`jobState`: a backoff before its next attempt, handed back by a
   * deploy, or still active): the queue runs it again; a Retry now would be a second forced run.
   */
  | { status: "job-pending"; runId: string; queuedJobId: string; jobState: string; auditId: string }
  /** Another Retry of this job is being queued at this moment: look again in a moment. */
  | { status: "retry-in-progress"; runId: string; auditId: string }
  /**
   * Its job went on: a later attempt began (`laterRunId`, now `laterStatus`; `trimmed` when its
   * record is gone from the history, by retention); retry that one if need be.
   */
  | { status: "job-went-on"; runId: string; laterRunId: string; laterStatus: RunStatus | "trimmed"; auditId: string }
  /** Its rebuild or tenant is no longer in the definitions. */
  | { status: "unknown-rebuild"; runId: string; message: string; auditId: string }
  /**
   * The request id named another request lately, or a request whose job an operator cancelled
   * (lib/rebuilds/trigger): nothing queued.
   */
  | { status: "request-id-reused" | "request-cancelled"; runId: string; message: string; auditId: string }
  /**
   * Retried already (`jobId`), and that job has not ended (`jobState`): follow it instead. `viaRunId`:
   * the Retry was of another attempt of the same job.
   */
  | {
      status: "already-retried";
      runId: string;
      jobId: string;
      jobState: string;
      viaRunId?: string;
      auditId: string;
    };

/** How long a run remembers the job its Retry queued (its record's default retention). */
export const RETRIED_AS_KEPT_MS = 30 * 86_400_000;
/** Job states of a retry still to come: a second Retry meanwhile would only queue a duplicate. */
const PENDING_JOB_STATES = new Set(["waiting", "delayed", "prioritized", "active", "waiting-children"]);

const RETRIED_AS_SCHEMA = z.object({
  jobId: z.string(),
  requestId: z.string().nullish().catch(null),
  runId: z.string().nullish().catch(null),
});

/** The job an operator's Retry of `runId` queued, if any (its page shows it). */
export async function readRetriedAs(
  client: Pick<Redis, "get">,
  keys: RedisKeys,
  runId: string,
): Promise<{ jobId: string; requestId: string | null } | null> {
  const raw = await client.get(keys.retriedAs(runId));
  if (!raw) return null;
  // Damaged or foreign: no Retry on record (the next one goes ahead and writes it again).
  const stored = parseStoredJson(RETRIED_AS_SCHEMA, raw);
  return stored ? { jobId: stored.jobId, requestId: stored.requestId ?? null } : null;
}

/** The newest Retry of any attempt of `jobId` (the run retried and the job it queued), if any. */
export async function readJobRetriedAs(
  client: Pick<Redis, "get">,
  keys: RedisKeys,
  jobId: string,
): Promise<{ jobId: string; requestId: string | null; runId: string | null } | null> {
  const raw = await client.get(keys.jobRetriedAs(jobId));
  const stored = raw ? parseStoredJson(RETRIED_AS_SCHEMA, raw) : null;
  return stored ? { jobId: stored.jobId, requestId: stored.requestId ?? null, runId: stored.runId ?? null } : null;
}

/** How long a job's "active" state is watched for the move its record's end is about to make. */
const ACTIVE_SETTLE_MS = 2_000;
/** The most links followed from a lost job to the job its request was queued again as. */
const REQUEUED_CHAIN_MAX = 10;

/**
 * The job that still carries `jobId`'s request in the queue, if any: `jobId` itself while waiting,
 * delayed or active, else the job a worker queued its request again as when the queue's Redis lost
 * it (`requeuedAs`, followed as a cancel follows it; review helper-177). An active job whose
 * attempt just recorded its end is moving on (to failed, completed or its backoff): watched for up
 * to ACTIVE_SETTLE_MS; still active after that (a paused worker), it is pending.
 */
async function pendingJobOf(deps: RetryDeps, jobId: string): Promise<{ jobId: string; jobState: string } | null> {
  const seen = new Set<string>();
  for (let job: string | null = jobId; job && !seen.has(job) && seen.size <= REQUEUED_CHAIN_MAX;) {
    seen.add(job);
    let state = await deps.queue.getJobState(job).catch(() => "unknown");
    for (const until = performance.now() + ACTIVE_SETTLE_MS; state === "active" && performance.now() < until;) {
      await new Promise((resolve) => setTimeout(resolve, 100));
      state = await deps.queue.getJobState(job).catch(() => "unknown");
    }
    if (PENDING_JOB_STATES.has(state)) return { jobId: job, jobState: state };
    job = await deps.main.get(deps.keys.requeuedAs(job)).catch(() => null);
  }
  return null;
}

/** How long one Retry may hold its job's retry lock (its trigger waits for replicas at most seconds). */
const RETRY_LOCK_MS = 15_000;

/** The most retry jobs followed from a job to the Retries of its retries (`pendingRetry`). */
const RETRY_CHAIN_MAX = 20;

/**
 * A Retry of `run`, or of its job, still to run (its job waiting, delayed or active): the run's own
 * Retry, then its job's newest Retry and, job by job, the newest Retry of each retry's own runs
 * (an operator may have retried the retry; the queue may give the first job up after either).
 * `viaRunId`: the run that Retry was of, when not `run`. A Retry sent again with its request id
 * is not in the way of itself.
 */
async function pendingRetry(
  deps: RetryDeps,
  run: { id: string; jobId: string },
  requestId: string | undefined,
): Promise<{ jobId: string; jobState: string; viaRunId?: string } | null> {
  const { main, keys } = deps;
  const own = await readRetriedAs(main, keys, run.id);
  const candidates: { jobId: string; requestId: string | null; viaRunId?: string }[] = own ? [own] : [];
  const followed = new Set<string>();
  for (let job = run.jobId; candidates.length <= RETRY_CHAIN_MAX && !followed.has(job);) {
    followed.add(job);
    const marker = await readJobRetriedAs(main, keys, job);
    if (!marker) break;
    const via = marker.runId && marker.runId !== run.id ? { viaRunId: marker.runId } : {};
    candidates.push({ jobId: marker.jobId, requestId: marker.requestId, ...via });
    job = marker.jobId;
  }
  const asked = new Set<string>();
  for (const candidate of candidates) {
    if (asked.has(candidate.jobId) || (requestId && candidate.requestId === requestId)) continue;
    asked.add(candidate.jobId);
    const jobState = await deps.queue.getJobState(candidate.jobId).catch(() => "unknown");
    if (PENDING_JOB_STATES.has(jobState)) {
      return { jobId: candidate.jobId, jobState, ...(candidate.viaRunId ? { viaRunId: candidate.viaRunId } : {}) };
    }
  }
  return null;
}

/** An aborted record closed by its job's next pickup names it (lib/runs/writer.ts ABANDONED_REASON). */
const REDELIVERED_AS = /the job was redelivered as attempt (\d+)/;

/** Later attempts' records looked for when the next one's is gone (a job picked up that many times). */
const LATER_ATTEMPTS_LOOKED_AT = 50;

/**
 * The job's next attempt after `run`, if it began: its record, or a later attempt's (the next one's
 * trimmed first: retention trims the oldest, while an aborted record's link is kept an hour —
 * black-box helper-181 retried such an attempt, and its version was built and published again over
 * a newer one); or, with none of them left, this record's own reason when the next pickup closed it
 * ("redelivered as attempt N") — `trimmed`. The job's pickup count alone is no proof: a pickup
 * that gave the job up may have left no record (review helper-184). Null when none is known.
 */
async function laterAttemptOf(
  deps: RetryDeps,
  run: RunRecord,
): Promise<{ id: string; status: RunStatus | "trimmed" } | null> {
  const next = runIdOf(run.jobId, run.attempt + 1);
  const later = await readRun(deps.main, deps.keys, next);
  if (later) return { id: later.id, status: later.status };
  const job = await deps.queue.getJob(run.jobId).catch(() => undefined);
  const upTo = Math.min(job?.attemptsStarted ?? 0, run.attempt + LATER_ATTEMPTS_LOOKED_AT);
  const laterIds: string[] = [];
  for (let attempt = run.attempt + 2; attempt <= upTo; attempt++) laterIds.push(runIdOf(run.jobId, attempt));
  // Which of them still have a record, in one round trip; the first one found is read.
  const checks = laterIds.length
    ? await deps.main.multi(laterIds.map((id) => ["exists", deps.keys.run(id)])).exec()
    : [];
  const kept = laterIds.find((_, i) => checks?.[i]?.[1] === 1);
  const found = kept ? await readRun(deps.main, deps.keys, kept) : null;
  if (found) return { id: found.id, status: found.status };
  const named = Number(REDELIVERED_AS.exec(run.reason ?? "")?.[1] ?? 0);
  if (named > run.attempt) return { id: runIdOf(run.jobId, named), status: "trimmed" };
  return null;
}

export async function retryRun(
  deps: RetryDeps,
  input: { runId: string; actor: string; reason: string; requestId?: string },
): Promise<RetryResult> {
  const { main, keys } = deps;
  const { runId, actor, reason } = input;
  const run = await readRun(main, keys, runId);
  if (!run) return { status: "not-found", runId };
  const audit = (result: "done" | "refused", detail: Record<string, unknown>) =>
    appendAudit(main, keys, {
      actor,
      action: "retry",
      reason,
      result,
      detail: { runId, rebuild: run.rebuild, tenant: run.tenant, version: run.version, ...detail },
    });
  if (!(RETRYABLE_STATUSES as readonly RunStatus[]).includes(run.status)) {
    const auditId = await audit("refused", { outcome: "not-retryable", runStatus: run.status });
    return { status: "not-retryable", runId, runStatus: run.status, auditId };
  }
  const later = await laterAttemptOf(deps, run);
  if (later) {
    const auditId = await audit("refused", { outcome: "job-went-on", laterRunId: later.id, laterStatus: later.status });
    return { status: "job-went-on", runId, laterRunId: later.id, laterStatus: later.status, auditId };
  }
  // Its job still in the queue: the queue runs it again (after its backoff, or once a worker takes
  // it back up); a Retry now would run the same request twice (black-box helper-174: two publishes).
  const queued = await pendingJobOf(deps, run.jobId);
  if (queued) {
    const { jobId, jobState } = queued;
    const auditId = await audit("refused", { outcome: "job-pending", jobId, jobState });
    return { status: "job-pending", runId, queuedJobId: jobId, jobState, auditId };
  }
  // One Retry of a job at a time: two at once (two tabs, two scripts) would each find no Retry
  // before them and each queue a forced job (black-box helper-174: four of five parallel ones did).
  const lockToken = `${actor}:${process.pid}:${performance.now()}`;
  if ((await main.set(keys.retryLock(run.jobId), lockToken, "PX", RETRY_LOCK_MS, "NX")) !== "OK") {
    const auditId = await audit("refused", { outcome: "retry-in-progress" });
    return { status: "retry-in-progress", runId, auditId };
  }
  try {
    return await retryUnlocked(deps, input, run, audit);
  } finally {
    if ((await main.get(keys.retryLock(run.jobId)).catch(() => null)) === lockToken)
      await main.del(keys.retryLock(run.jobId)).catch(() => {});
  }
}

/** `retryRun` once it holds the job's retry lock. */
async function retryUnlocked(
  deps: RetryDeps,
  input: { runId: string; actor: string; reason: string; requestId?: string },
  run: RunRecord,
  audit: (result: "done" | "refused", detail: Record<string, unknown>) => Promise<string>,
): Promise<RetryResult> {
  const { main, keys } = deps;
  const { runId, actor } = input;
  // Retried already and that job still to run: a second Retry (another tab, a double click in
  // two windows) would only queue a duplicate. The same request sent again goes on: the trigger
  // answers it with its job.
  const pending = await pendingRetry(deps, run, input.requestId);
  if (pending) {
    const { jobId, jobState, viaRunId } = pending;
    const auditId = await audit("refused", {
      outcome: "already-retried",
      jobId,
      jobState,
      ...(viaRunId ? { viaRunId } : {}),
    });
    return { status: "already-retried", runId, jobId, jobState, ...(viaRunId ? { viaRunId } : {}), auditId };
  }
  const result = await triggerRebuild(deps.queue, main, keys, deps.definitions, run.rebuild, {
    ...(run.tenant ? { tenant: run.tenant } : {}),
    ...(run.version ? { version: run.version } : {}),
    force: true,
    trigger: "manual",
    requestedBy: actor,
    retryOf: runId,
    ...(input.requestId ? { requestId: input.requestId } : {}),
    ...(deps.replicas ? { replicas: deps.replicas } : {}),
  });
  const queued = result.status === "queued" || result.status === "deduplicated" || result.status === "not-replicated";
  if (queued) {
    const retriedAs = { jobId: result.jobId, requestId: input.requestId ?? null };
    await main
      .multi()
      .set(keys.retriedAs(runId), JSON.stringify(retriedAs), "PX", RETRIED_AS_KEPT_MS)
      .set(keys.jobRetriedAs(run.jobId), JSON.stringify({ ...retriedAs, runId }), "PX", RETRIED_AS_KEPT_MS)
      .exec();
  }
  if (result.status === "not-replicated") {
    const auditId = await audit("done", { outcome: result.status, jobId: result.jobId });
    return { status: result.status, runId, jobId: result.jobId, message: result.message, auditId };
  }
  if (result.status === "request-cancelled") {
    const auditId = await audit("refused", { outcome: result.status, jobId: result.jobId, message: result.message });
    return { status: result.status, runId, message: result.message, auditId };
  }
  if ("jobId" in result) {
    const auditId = await audit("done", { outcome: result.status, jobId: result.jobId });
    return { status: result.status, runId, jobId: result.jobId, auditId };
  }
  const auditId = await audit("refused", { outcome: result.status, message: result.message });
  if (result.status === "request-id-reused") return { status: result.status, runId, message: result.message, auditId };
  return { status: "unknown-rebuild", runId, message: result.message, auditId };
}
