/**
 * An operator cancels a rebuild job, running or waiting. The request is written first (a key by
 * job id, lib/rebuilds/cancel-request.ts), whatever state the job is in, so every way the job can
 * go next ends in `cancelled`:
 *
 * - waiting / delayed (backoff, deferred behind another version's claim): removed from the queue
 *   here and recorded `cancelled` (a record of the attempt it would have been);
 * - active: the worker holding it — whichever it is — finds the request within a poll (0.5 s),
 *   aborts its steps (SIGTERM, SIGKILL after killGrace), releases the claim, records `cancelled`
 *   and fails the job without a retry;
 * - picked up meanwhile, redelivered after a stall, or moved back to delayed between our read
 *   and our remove: the worker checks the request when it picks the job up.
 *
 * Only this job's request ends: other jobs of the output (another version) are untouched, and
 * the claim and fencing rules are the same as ever. The next tick of a schedule is not a job to
 * cancel (pause the schedule instead). Every call is audited.
 */
import type { Job, Queue } from "bullmq";
import type { Redis } from "ioredis";
import { appendAudit } from "../audit/append";
import { describeCancel, noteCancelEnded, writeCancelRequest } from "../rebuilds/cancel-request";
import { rebuildJobData, scheduledTickOf } from "../rebuilds/queue";
import { recordUnrunAttempt } from "../rebuilds/unrun-attempt";
import type { RedisKeys } from "../redis/keys";
import type { ScriptingClient } from "../redis/scripts";
import { DEFAULT_RETENTION, type RunRetention } from "../runs/records";
import { listRuns } from "../runs/list";
import type { RunStatus } from "../runs/types";
import { liveWorkerIdSet } from "../workers/heartbeat";

export interface CancelDeps {
  queue: Pick<Queue, "getJob">;
  /** Main Redis: cancel requests, run records, audit. */
  main: ScriptingClient & Pick<Redis, "set" | "get" | "del" | "hget" | "zrevrangebyscore" | "pipeline">;
  keys: RedisKeys;
  retention?: RunRetention;
}

export interface CancelRequestInput {
  jobId: string;
  actor: string;
  reason: string;
}

export type CancelResult = {
  jobId: string;
  auditId: string;
  /** The lost job whose id the operator named: its request had been queued again as `jobId`. */
  requeuedFrom?: string;
  /**
   * Other requests that had joined this job while it waited (deduplicated into it): they end with
   * it (black-box helper-178: a cancel ended them unseen). Absent: none.
   */
  joinedRequests?: number;
} &
  /** It was waiting or delayed: removed from the queue, its run recorded cancelled. */
  (
    | { status: "removed"; runId: string }
    /** It is running: the worker running it stops it (its run record says when). */
    | { status: "cancelling"; runId: string | null }
    /**
     * It has finished already: nothing to cancel. `state` is BullMQ's (completed, failed), or
     * `removed` for a job gone from the queue whose run records remain (`lastRun`: how it ended).
     */
    | { status: "finished"; state: string; lastRun?: { id: string; status: RunStatus } }
    /** The next tick of a schedule (not a run yet): pause the schedule instead. */
    | { status: "scheduled-tick" }
    /**
     * Neither the queue nor the run history knows it. `requestKept`: a trigger's job id — the
     * request stays, so a worker still running a job its Redis lost stops it.
     */
    | { status: "not-found"; requestKept?: true }
    /**
     * Gone from the queue, its last run (`runId`) still running on a worker that has no live
     * heartbeat: nothing runs it; the sweep closes the record. The request is kept.
     */
    | { status: "abandoned"; runId: string; requestKept: true }
  );

const WAITING = new Set(["waiting", "delayed", "prioritized", "waiting-children"]);
/** The job ids triggers make (lib/rebuilds/trigger.ts): `run-<uuid>`. */
const TRIGGER_JOB_ID = /^run-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

export async function cancelJob(
  deps: CancelDeps,
  input: CancelRequestInput,
  /** Already following a lost job's link (`requeuedAs`): not followed again. */
  followed = false,
): Promise<CancelResult> {
  const { queue, main, keys } = deps;
  const { jobId, actor, reason } = input;
  const audit = (result: "done" | "refused", detail: Record<string, unknown>) =>
    appendAudit(main, keys, { actor, action: "cancel", reason, result, detail: { jobId, ...detail } });

  // How the job's last run ended, for a job that has finished: BullMQ's state alone says
  // "failed" for a run an earlier cancel ended `cancelled`.
  const lastRunOf = async () => {
    const [last] = (await listRuns(main, keys, { jobId }, 1)).runs;
    return last ? { id: last.id, status: last.status, workerId: last.workerId } : undefined;
  };
  const finished = async (
    state: string,
    place: Record<string, unknown>,
    lastRun: { id: string; status: RunStatus; workerId?: string | null } | undefined,
  ): Promise<CancelResult> => {
    const last = lastRun && { id: lastRun.id, status: lastRun.status };
    const auditId = await audit("refused", { ...place, outcome: state, ...(last ? { lastRun: last } : {}) });
    return { status: "finished", jobId, state, ...(last ? { lastRun: last } : {}), auditId };
  };

  const job = (await queue.getJob(jobId)) as Job | undefined;
  if (!job) {
    // Gone from the queue (removed by an earlier cancel, or pruned after it ended): its run
    // records still say how it ended, so a second cancel is "finished", not "unknown".
    const lastRun = await lastRunOf();
    // Unless it was lost (the queue's Redis went back to before it: a restart from an older
    // snapshot, a failover) while a worker still runs it: that worker looks for a cancel request
    // before it queues the request again (worker/rebuild-worker.ts requeueIfLost), and its cancel
    // watch stops the run. Left for any job id a trigger makes (never used again): its last run may
    // say deferred or failed (to be retried) when the Redis lost the job (review helper-159).
    if (TRIGGER_JOB_ID.test(jobId)) {
      await writeCancelRequest(main, keys, jobId, { actor, reason, at: Date.now() });
      // Its request queued again as another job by the worker that found it lost: that job is
      // what runs it now (review helper-164: the cancel stopped nothing, and said so or worse).
      // Followed to the end of a chain of losses (J → J2 → J3), each id's request kept on the way.
      if (!followed) {
        const seen = new Set([jobId]);
        let last = jobId;
        for (let next = await main.get(keys.requeuedAs(last)); next && !seen.has(next) && seen.size <= 10;) {
          seen.add(next);
          last = next;
          const nextLink = await main.get(keys.requeuedAs(last));
          if (nextLink && !seen.has(nextLink))
            await writeCancelRequest(main, keys, last, { actor, reason, at: Date.now() });
          next = nextLink;
        }
        if (last !== jobId) return { ...(await cancelJob(deps, { ...input, jobId: last }, true)), requeuedFrom: jobId };
      }
      // Not in the queue, yet its last run is running: a job lost under its worker. The request
      // stops it, and its record says cancelled: "finished" would be untrue (review helper-159) —
      // unless that worker is gone (no live heartbeat): nothing runs it, the sweep closes it.
      if (lastRun?.status === "running") {
        const runId = lastRun.id;
        const live = lastRun.workerId ? (await liveWorkerIdSet(main, keys)).has(lastRun.workerId) : false;
        if (!live)
          return {
            status: "abandoned",
            jobId,
            runId,
            requestKept: true,
            auditId: await audit("refused", { outcome: "abandoned", runId, requestKept: true }),
          };
        return {
          status: "cancelling",
          jobId,
          runId,
          auditId: await audit("done", { outcome: "cancelling", runId, inQueue: false }),
        };
      }
      if (!lastRun)
        return {
          status: "not-found",
          jobId,
          requestKept: true,
          auditId: await audit("refused", { outcome: "not-found", requestKept: true }),
        };
    }
    if (lastRun) return finished("removed", {}, lastRun);
    return { status: "not-found", jobId, auditId: await audit("refused", { outcome: "not-found" }) };
  }
  const place = placeOf(job);
  let state = await job.getState();
  if (state === "completed" || state === "failed")
    return finished(state, place, await lastRunOf().catch(() => undefined));
  if (state === "delayed" && isNextScheduledTick(job)) {
    return {
      status: "scheduled-tick",
      jobId,
      auditId: await audit("refused", { ...place, outcome: "scheduled-tick" }),
    };
  }

  // An earlier cancel's request stays in force (the run record names it); this one is audited.
  const request = await writeCancelRequest(main, keys, jobId, { actor, reason, at: Date.now() });
  // Requests that had joined the job (trigger.ts counts them): the answer's and the audit's field.
  const readJoined = async (): Promise<{ joinedRequests?: number }> => {
    const joined = Number((await main.get(keys.joinedRequests(jobId)).catch(() => null)) ?? 0);
    return joined > 0 ? { joinedRequests: joined } : {};
  };
  if (WAITING.has(state)) {
    try {
      await job.remove();
      await noteCancelEnded(main, keys, jobId);
      // Read after the removal: a join racing it counted itself before it looked (trigger.ts).
      const joinedRequests = await readJoined();
      const runId = await recordCancelledWaiting(
        deps,
        job,
        describeCancel(request) +
          (joinedRequests.joinedRequests
            ? `; ${joinedRequests.joinedRequests} other request(s) that had joined this job end with it`
            : ""),
      );
      return {
        status: "removed",
        jobId,
        runId,
        ...joinedRequests,
        auditId: await audit("done", { ...place, outcome: "removed", runId, ...joinedRequests }),
      };
    } catch {
      // Locked: a worker picked it up meanwhile; it finds the request when it starts.
      state = await job.getState().catch(() => "active");
    }
  }
  if (state === "completed" || state === "failed")
    return finished(state, place, await lastRunOf().catch(() => undefined));
  const runId = await main.get(keys.runOpenAttempt(jobId));
  const joinedRequests = await readJoined();
  return {
    status: "cancelling",
    jobId,
    runId,
    ...joinedRequests,
    auditId: await audit("done", { ...place, outcome: "cancelling", runId, ...joinedRequests }),
  };
}

function placeOf(job: Job): { rebuild: string | null; tenant: string | null } {
  const data = rebuildJobData.safeParse(job.data);
  return data.success
    ? { rebuild: data.data.rebuild, tenant: data.data.tenant ?? null }
    : { rebuild: null, tenant: null };
}

/**
 * A scheduler's next tick: BullMQ refuses to remove it (it belongs to the scheduler). Once a
 * tick started (a deferral or a backoff brought it back to delayed) it is an ordinary job.
 */
function isNextScheduledTick(job: Job): boolean {
  return scheduledTickOf(job.id) !== null && job.attemptsStarted === 0;
}

/** The record of a removed job: the attempt it would have been, ended `cancelled` (unrun-attempt.ts). */
async function recordCancelledWaiting(deps: CancelDeps, job: Job, reason: string): Promise<string> {
  const store = { client: deps.main, keys: deps.keys, retention: deps.retention ?? DEFAULT_RETENTION };
  const { runId } = await recordUnrunAttempt(store, job, {
    attempt: job.attemptsStarted + 1,
    status: "cancelled",
    reason,
  });
  return runId;
}
