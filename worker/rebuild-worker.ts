/**
 * BullMQ wiring of the rebuild processor. What BullMQ does not do by itself is wired here
 * (notes/bullmq.md): abort on a lost job lock, a capped backoff, no retry for permanent
 * failures, deferral while another version holds the output, and hand-back on shutdown.
 */
import { DelayedError, UnrecoverableError, WaitingError, Worker, type Job, type Queue } from "bullmq";
import type { Redis } from "ioredis";
import {
  backoffStrategyFor,
  handBackUnstarted,
  jobRetention,
  queuePrefix,
  REBUILD_QUEUE,
  rebuildJobData,
  type RebuildJobData,
} from "../lib/rebuilds/queue";
import {
  CANCEL_ABORT_REASON,
  CancelWatch,
  noteCancelEnded,
  noteRequeued,
  readCancelRequest,
} from "../lib/rebuilds/cancel-request";
import { isSchedulePaused } from "../lib/rebuilds/schedules";
import { clearPendingTrigger, triggerRebuild } from "../lib/rebuilds/trigger";
import { DEFER_MIN_MS } from "../lib/rebuilds/decide";
import { writeDeferNote } from "../lib/rebuilds/defer-note";
import {
  RebuildError,
  runRebuild,
  type LostJobCheck,
  type RebuildDeps,
  type RebuildOutcome,
} from "../lib/rebuilds/run-rebuild";
import { lockRenewTimeFor, stepWarden, wardenSilenceFor } from "../lib/rebuilds/steps/warden";
import { LOCK_LOST_ABORT_REASON } from "../lib/rebuilds/steps/context";
import { DEFAULT_RETENTION } from "../lib/runs/records";
import { runIdOf } from "../lib/runs/types";
import { isFinalStatus } from "../lib/runs/transitions";
import { publishedByRun } from "../lib/rebuilds/published-by-run";
import { recordUnrunAttempt } from "../lib/rebuilds/unrun-attempt";
import { withTimeout } from "../lib/settled-within";
import { connectionEpoch } from "../lib/redis/replicas";

/** Lost pickups (stalls, counted over the job's life) after which BullMQ fails a job (its next pickup records that: QUEUE_GAVE_UP). */
const MAX_STALLED_COUNT = 5;
/** How long a given-up job's record waits for the attempt before it to end (the sweep closes a dead one within a heartbeat TTL or two). */
const GIVEN_UP_WAIT_MS = 60_000;
/** Pickups after which BullMQ fails a job (deferrals included). */
const MAX_STARTED_ATTEMPTS = 1_000;

export interface RebuildWorkerOptions {
  concurrency: number;
  /**
   * BullMQ job lock. A SIGKILLed worker's job is redelivered after the lock expires and the
   * next stalled check runs: lockDuration + stalledInterval ≤ 8 s with the defaults, inside
   * the 10 s goal with room for a loaded machine (measured up to 9.6 s with a 4 s interval). The lock is renewed at most lockDuration/4 apart (lockRenewTime, for the step warden); tile steps yield often enough.
   */
  lockDuration: number;
  stalledInterval: number;
  /** Start taking jobs at once (BullMQ's `autorun`, default true); false: the caller calls `worker.run()`. */
  autorun?: boolean;
}

export const DEFAULT_WORKER_OPTIONS: RebuildWorkerOptions = {
  // Rebuilds mostly wait on their own processes: a few run side by side (different outputs,
  // or a duplicate that is skipped at once instead of queueing behind the original).
  concurrency: 4,
  lockDuration: 5_000,
  stalledInterval: 3_000,
};

/** What a job returns: the attempt's outcome, or nothing done for a tick of a paused schedule. */
export type RebuildJobResult = RebuildOutcome | { status: "schedule-paused" };

export interface RunningJobs {
  ids(): string[];
  /** Jobs this worker has finished processing (any outcome), since it started. */
  processed(): number;
  /**
   * Aborts every job running here, and every one picked up later (e.g. "shutdown": each hands its
   * job back). For a worker that is stopping: `worker.close()` right after, or it would pick up
   * the jobs it hands back again and again.
   */
  abortAll(reason: string): void;
  /**
   * The records of jobs the queue gave up whose attempt before has not ended yet, written now
   * (each says so) instead of after their wait: for a worker that is stopping, before its Redis
   * connections close (review helper-173: such a record was lost at a stop).
   */
  settleGivenUp(): Promise<void>;
}

/** One pickup of a job on this worker: its own abort, beside BullMQ's job signal. */
interface Pickup {
  abort: AbortController;
}

/** BullMQ's reasons for failing a job at a pickup without running it, and what each means here. */
const QUEUE_GAVE_UP = new Map([
  [
    "job stalled more than allowable limit",
    `its pickups were lost ${MAX_STALLED_COUNT + 1} times (its worker killed, paused past its job lock, or stopped before it handed the job back)`,
  ],
  ["job started more than allowable limit", `it was picked up more than ${MAX_STARTED_ATTEMPTS} times`],
]);

/** The queue a lost job's request is queued again on (`requeueIfLost`). */
type RequeueQueue = Pick<Queue, "add" | "getJobState">;

export function startRebuildWorker(
  deps: RebuildDeps & { connection: Redis; queue?: RequeueQueue },
  options: RebuildWorkerOptions = DEFAULT_WORKER_OPTIONS,
): { worker: Worker<RebuildJobData, RebuildJobResult>; running: RunningJobs } {
  // The pickup of each job this worker runs now: one per job id. BullMQ keys a worker's lock
  // renewals by job id, so a pickup of a job beside an older, stale pickup of it on this worker
  // (the worker stalled past its job lock and was handed the job again) would lose its renewals
  // when the older one ends — then the next pickup's, and so on: the job would never finish.
  const pickups = new Map<string, Pickup>();
  /** Set by `abortAll` (the worker is stopping): every later pickup is aborted at once too. */
  let allAbortedFor: string | null = null;
  let processed = 0;
  const log = deps.log ?? (() => {});
  // A worker that stops running long enough to lose its job lock loses its jobs to other
  // attempts: its steps must not write beside them (the warden SIGKILLs them before that).
  stepWarden.start(wardenSilenceFor(options.lockDuration));
  // Operators' cancels reach whichever worker holds the job: each polls its own active jobs.
  const cancels = new CancelWatch(
    deps.main,
    deps.keys,
    () => [...pickups.keys()],
    (jobId, request) => {
      log(`job ${jobId}: cancel requested by ${request.actor}; aborting it`);
      abortJob(jobId, CANCEL_ABORT_REASON);
    },
  );

  // Aborts the pickup of a job running here (its signal joins BullMQ's job signal).
  const abortJob = (jobId: string, reason: string) => pickups.get(jobId)?.abort.abort(reason);

  /**
   * Moves the job to delayed until `until` (no attempt spent). A deferral that no run record
   * explains (`recorded` false) leaves `reason` as a note for the queue view.
   */
  const defer = async (job: Job, token: string | undefined, until: number, reason: string, recorded = false) => {
    if (!recorded) await writeDeferNote(deps.main, deps.keys, job.id!, { reason, until }).catch(() => {});
    await job.moveToDelayed(until, token);
    throw new DelayedError(`deferred: ${reason}`);
  };

  const processor = async (
    job: Job<RebuildJobData, RebuildJobResult>,
    token?: string,
    signal?: AbortSignal,
  ): Promise<RebuildJobResult> => {
    const jobId = job.id!;
    if (allAbortedFor !== null) {
      // A job BullMQ fetched just as the worker began to stop (its fetch was under way) is handed
      // back untouched, also one whose earlier pickup still runs here (the stop aborted that one;
      // deferring this fetch instead would keep its attempt counted): no run record (it never
      // ran: the history must not show an attempt), its waiting-trigger marker kept (it still
      // waits), no claim asked for. The attempt BullMQ counted at the fetch is taken back: no
      // attempt number is spent on it. Not moved back (an error, a lock that is no longer this
      // worker's): the stalled check hands it back once this worker's lock has run out.
      const outcome = !token
        ? "not handed back (no lock token)"
        : await handBackUnstarted(deps.connection, job, worker.toKey(jobId), token).then(
            (handBack) =>
              handBack.kind === "handed-back"
                ? "handed back without running"
                : handBack.kind === "not-ours"
                  ? "not handed back (its lock is another fetch's now)"
                  : handBack.kind === "lock-gone"
                    ? "not handed back (its lock ran out: the job is the stalled check's)"
                    : `its attempt taken back, but not moved to waiting (${handBack.error}): the stalled check hands it back`,
            (error: unknown) => `not handed back: ${String(error)}`,
          );
      log(`job ${jobId}: fetched as the worker stopped; ${outcome}`);
      throw new WaitingError();
    }
    const earlier = pickups.get(jobId);
    if (earlier) {
      // This worker still runs an earlier pickup of the job, which lost its job lock (this pickup
      // has it now): it is stopped as a lost lock stops it, and this pickup waits until it is
      // gone — it starts nothing beside it, not even a record.
      const reason = "picked up again while its earlier pickup still runs on this worker; stopping that one, deferred";
      log(`job ${jobId}: ${reason}`);
      earlier.abort.abort(LOCK_LOST_ABORT_REASON);
      return defer(job, token, Date.now() + DEFER_MIN_MS, reason);
    }
    const pickup: Pickup = { abort: new AbortController() };
    pickups.set(jobId, pickup);
    const jobSignal = signal ? AbortSignal.any([signal, pickup.abort.signal]) : pickup.abort.signal;
    // A started job drops its "waiting trigger" marker, so later triggers queue a new job. A
    // forced job does it here; any other with its idempotency check (run-rebuild, one round
    // trip), or below when it fails before that check ran.
    const data = rebuildJobData.safeParse(job.data);
    // Asked at most once per pickup: by the record's reason of one that lost its job lock, and
    // before the job is moved on (deferred, retried; handed back only when its lock was lost: a
    // deploy's hand-back must not wait on a Redis that does not answer).
    let lostCheck: Promise<LostJobCheck> | null = null;
    const queue = deps.queue;
    const attempt = Math.max(1, job.attemptsStarted);
    // The main Redis connection's reconnects so far: a job gone while there was none since is not
    // one a restart or failover lost (requeueIfLost).
    const epochAtPickup = connectionEpoch(deps.main);
    const requeueOnce =
      queue && data.success
        ? () =>
            (lostCheck ??= requeueIfLost(jobId, attempt, data.data, queue, epochAtPickup).catch((error: unknown) => ({
              kind: "unknown" as const,
              why: String(error),
            })))
        : null;
    const lockLost = () => jobSignal.aborted && jobSignal.reason === LOCK_LOST_ABORT_REASON;
    const clearMarker = () => {
      if (data.success) void clearPendingTrigger(deps.main, deps.keys, data.data, jobId).catch(() => {});
    };
    try {
      if (data.success && data.data.force) clearMarker();
      // A cancel that came while the job waited, or while another worker had it, is found by the
      // attempt's first record write (run-rebuild), in the same round trip. A scheduled tick that
      // was already waiting when its schedule was paused (lib/rebuilds/schedules) is not run,
      // unless it was cancelled meanwhile; one that had started (deferred, retrying) runs on: its
      // record must reach a final status.
      if (data.success && data.data.trigger === "schedule" && job.attemptsStarted <= 1) {
        const pending = await readCancelRequest(deps.main, deps.keys, jobId).catch(() => null);
        if (pending) {
          cancels.note(jobId, pending);
        } else if (await scheduleIsPaused(data.data)) {
          log(`job ${jobId}: its schedule is paused; not run`);
          return { status: "schedule-paused" as const };
        }
      }
      const outcome = await runRebuild(deps, {
        id: jobId,
        attempt: Math.max(1, job.attemptsStarted),
        createdAt: job.timestamp,
        data: job.data,
        // BullMQ fails the job at this many failed tries (attemptsMade counts failures only:
        // deferrals and hand-backs spend none).
        lastTry:
          job.attemptsMade + 1 >= (job.opts.attempts ?? 1)
            ? { attempt: job.attemptsMade + 1, of: job.opts.attempts ?? 1 }
            : null,
        signal: jobSignal,
        cancelRequest: () => cancels.requestFor(jobId),
        cancelFound: (request) => cancels.note(jobId, request),
        checkCancel: async () => {
          const request = await readCancelRequest(deps.main, deps.keys, jobId).catch(() => null);
          if (request) cancels.note(jobId, request);
        },
        progress: (fraction) => void job.updateProgress(Math.round(fraction * 100)).catch(() => {}),
        // BullMQ's own owner check (extendLock answers 1 only to the lock's token); extending it
        // is what the lock renewal does anyway.
        ...(token ? { ownsLock: async () => (await job.extendLock(token, options.lockDuration)) === 1 } : {}),
        ...(requeueOnce ? { requeueIfLost: requeueOnce } : {}),
      });
      switch (outcome.status) {
        case "deferred": {
          const check = await requeueOnce?.();
          // Gone from the queue's Redis (its request queued again, or removed on purpose): there is
          // no job to move; the pickup ends without touching it (review helper-177: moveToDelayed
          // then BullMQ's own moveToFailed each failed on the missing key).
          if (check?.kind === "requeued" || check?.kind === "removed") throw new WaitingError();
          return defer(job, token, outcome.until, outcome.note ?? `output held by ${outcome.heldBy}`, !outcome.note);
        }
        case "handed-back": {
          if (lockLost()) await requeueOnce?.();
          // A stale token (the lock ran out while this worker stalled: the job is another
          // attempt's, or the stalled check moves it back) is refused: nothing to hand back.
          const refused = await job.moveToWait(token).then(
            () => null,
            (error: unknown) => String(error),
          );
          if (refused !== null) {
            log(`job ${jobId}: not handed back: ${refused}`);
            // Refused because the job is gone (a Redis restart lost it, and its record had not
            // told): looked up, and its request queued again when nothing else removed it.
            if (/missing key/i.test(refused)) await requeueOnce?.();
          }
          throw new WaitingError();
        }
        case "cancelled":
          log(`job ${jobId}: ${outcome.reason}`);
          await noteCancelEnded(deps.main, deps.keys, jobId).catch(() => {});
          // Failed without a retry: the run record says cancelled, by whom and why.
          throw new UnrecoverableError(outcome.reason);
        default:
          log(`job ${jobId} (${job.data.rebuild}${job.data.tenant ? `/${job.data.tenant}` : ""}): ${outcome.status}`);
          return outcome;
      }
    } catch (error) {
      if (error instanceof DelayedError || error instanceof WaitingError) throw error;
      if (data.success && !data.data.force) clearMarker();
      if (error instanceof RebuildError) {
        // A retry needs the job: one the queue's Redis lost meanwhile is queued again.
        if (error.retry) await requeueOnce?.();
        log(
          `job ${jobId}: ${error.retry ? "transient failure, will retry" : (error.ended ?? "failed")}: ${error.message}`,
        );
        throw error.retry ? error : new UnrecoverableError(error.message);
      }
      throw error;
    } finally {
      if (pickups.get(jobId) === pickup) pickups.delete(jobId);
      cancels.forget(jobId);
      processed += 1;
    }
  };
  /**
   * A job this pickup is about to move on (retry, deferral) or whose lock it lost, looked up in
   * the queue's Redis: still there, BullMQ runs it again. Gone, it was removed on purpose when an
   * operator's cancel request for it is there (review helper-155: a cancelled job was brought
   * back) or a later attempt of it has a record (finished by another pickup, then trimmed). Gone
   * without either, the Redis lost it (a restart from an older snapshot, a failover to a replica
   * that had not received it: helper-151) and nothing would run it again: its request is queued
   * again as a trigger queues it (a waiting job of the same request answers it instead; a repeat
   * is harmless). This pickup's own record is no evidence either way: its writes may have made it
   * again after the loss (review helper-156). The look is asked again (a second apart, three
   * times) while that Redis does not answer; the trigger is sent once (one that timed out may
   * still land: sent again it could queue twice).
   */
  const requeueIfLost = async (
    jobId: string,
    attempt: number,
    data: RebuildJobData,
    queue: RequeueQueue,
    epochAtPickup: number,
  ): Promise<LostJobCheck> => {
    let failure = "";
    for (let look = 0; look < 3; look++) {
      if (look > 0) await new Promise((resolve) => setTimeout(resolve, 1_000));
      let found: number[];
      try {
        const replies = await withTimeout(
          deps.main
            .multi()
            .exists(worker.toKey(jobId))
            .exists(deps.keys.cancelRequest(jobId))
            .exists(deps.keys.run(runIdOf(jobId, attempt + 1)))
            .exec(),
          1_500,
          "the job's lookup",
        );
        if (!replies || replies.some(([error]) => error)) throw new Error("the lookup was refused");
        found = replies.map(([, reply]) => Number(reply));
      } catch (error) {
        failure = error instanceof Error ? error.message : String(error);
        continue;
      }
      if (found[0] === 1) return { kind: "present" };
      if (found[1] === 1 || found[2] === 1) return { kind: "removed" };
      // Lost writes need a restart or a failover, and either breaks this connection: with no
      // reconnect since the pickup began (the lookup's own reply came after any), the job was
      // removed on purpose or by the retention of finished jobs, its later attempt's record trimmed
      // too (review helper-177: queued again, an old request could build an older version over a
      // newer one).
      if (connectionEpoch(deps.main) === epochAtPickup) {
        log(
          `job ${jobId}: gone from the queue's Redis, which has not restarted since this pickup began (no reconnect): removed on purpose or by retention; not queued again`,
        );
        return { kind: "removed" };
      }
      const request = {
        ...(data.tenant ? { tenant: data.tenant } : {}),
        ...(data.version ? { version: data.version } : {}),
        force: data.force,
        trigger: data.trigger,
        ...(data.requestedBy ? { requestedBy: data.requestedBy } : {}),
        ...(data.retryOf ? { retryOf: data.retryOf } : {}),
      };
      const result = await withTimeout(
        triggerRebuild(queue, deps.main, deps.keys, deps.definitions, data.rebuild, request),
        3_000,
        "queuing it again",
      ).catch((error: unknown) => ({ status: "error" as const, message: String(error) }));
      if ("message" in result) {
        return { kind: "unknown", why: `it is gone, and queuing its request again failed: ${result.message}` };
      }
      const joined = result.status === "deduplicated";
      // A cancel of this job's id follows it there (an operator still sees this id) — not into a
      // waiting job it joined, which carries other requests too (review helper-165).
      if (!joined)
        await noteRequeued(deps.main, deps.keys, jobId, result.jobId).catch((error: unknown) =>
          log(
            `job ${jobId}: could not note the job its request became (a cancel of ${jobId} will not follow it): ${String(error)}`,
          ),
        );
      log(
        `job ${jobId}: gone from the queue's Redis, not by a cancel or another pickup (it lost its last writes): its request ${joined ? "joined waiting job" : "queued again as job"} ${result.jobId}`,
      );
      return { kind: "requeued", jobId: result.jobId, joined };
    }
    return { kind: "unknown", why: `the queue's Redis did not answer: ${failure}` };
  };
  const scheduleIsPaused = (data: RebuildJobData) =>
    isSchedulePaused(deps.main, deps.keys, data.rebuild, data.tenant).catch(() => false);

  const worker = new Worker<RebuildJobData, RebuildJobResult>(REBUILD_QUEUE, processor, {
    connection: deps.connection,
    prefix: queuePrefix(deps.keys),
    concurrency: options.concurrency,
    lockDuration: options.lockDuration,
    // Renewals at most a quarter of the lock apart: the step warden's limit depends on it.
    lockRenewTime: lockRenewTimeFor(options.lockDuration),
    stalledInterval: options.stalledInterval,
    autorun: options.autorun ?? true,
    // A job whose worker died is redelivered; dying twice (a deploy, then a crash) is no reason
    // to give up on it — the claim and the fence keep redeliveries harmless.
    maxStalledCount: MAX_STALLED_COUNT,
    // Backstop for scheduler jobs, which ignore maxStalledCount (bullmq#4220). Every pickup
    // counts, deferrals behind another version's claim included (up to 30 s each), so the cap
    // is high: ~8 h of waiting behind other holders before a job is failed.
    maxStartedAttempts: MAX_STARTED_ATTEMPTS,
    settings: { backoffStrategy: backoffStrategyFor(deps.definitions) },
    ...jobRetention(deps.definitions.retention),
  });
  // BullMQ keeps running a processor whose job lock it lost; tell the processor (notes/bullmq.md).
  worker.on("lockRenewalFailed", (ids: string[]) => {
    for (const id of ids) {
      log(`job ${id}: job lock lost; aborting it`);
      abortJob(id, LOCK_LOST_ABORT_REASON);
    }
  });
  // The queue gave a job up at a pickup, before this processor saw it (BullMQ's stall limit: its
  // pickups were lost too often; or its start limit): that attempt's record says so, failed, so
  // the history does not end on a deferral or an abort that says the request is kept, and the run
  // can be retried (black-box helper-167: six lost pickups ended a job with nothing saying so).
  worker.on("failed", (job, error) => {
    if (!job?.id || !(error instanceof UnrecoverableError) || !QUEUE_GAVE_UP.has(error.message)) return;
    // An earlier pickup of it still here (this worker stalled past its lock, then was handed it).
    abortJob(job.id, LOCK_LOST_ABORT_REASON);
    const pending = { hurry: false, done: Promise.resolve() };
    pending.done = recordGivenUp(job, QUEUE_GAVE_UP.get(error.message)!, pending).finally(() =>
      givingUp.delete(pending),
    );
    givingUp.add(pending);
  });
  /** Given-up records waiting for the attempt before them to end (`settleGivenUp`). */
  const givingUp = new Set<{ hurry: boolean; done: Promise<void> }>();
  /**
   * The given-up attempt's record, once the attempt before it has ended (review helper-172: a
   * holder paused after its check before publishing may still publish; its closing record, or the
   * sweep's, comes first): it ended rebuilt or skipped — the request was served, and the record
   * says only that the queue gave the job up — or not, and it says the request was not served.
   */
  const recordGivenUp = async (job: Job<RebuildJobData>, why: string, pending: { hurry: boolean }) => {
    const attempt = Math.max(1, job.attemptsStarted);
    const previous = attempt > 1 ? runIdOf(job.id!, attempt - 1) : null;
    let ended: string | null = previous ? null : "none";
    for (let waited = 0; previous && waited <= GIVEN_UP_WAIT_MS && !pending.hurry; waited += 2_000) {
      // A read that fails or hangs (a failover, a frozen Redis) is asked again, not taken as an end.
      const status = await withTimeout(deps.main.hget(deps.keys.run(previous), "status"), 2_000, "run status").catch(
        () => undefined,
      );
      if (status === null || (status !== undefined && isFinalStatus(status))) {
        ended = status ?? "none";
        break;
      }
      for (let slept = 0; slept < 2_000 && !pending.hurry; slept += 250)
        await new Promise((resolve) => setTimeout(resolve, 250));
    }
    const served = ended === "rebuilt" || ended === "skipped";
    const reason = `the queue gave this job up at its pickup ${attempt}: ${why}; ${
      served
        ? `attempt ${attempt - 1} ended ${ended}, so its request was served`
        : ended === null
          ? `attempt ${attempt - 1} had not ended ${pending.hurry ? "when this worker stopped" : `after ${GIVEN_UP_WAIT_MS / 1_000} s`} (its worker paused or gone): if it publishes, its record says so; else retry this run`
          : "its request was not served: retry this run to queue it again"
    }`;
    const data = rebuildJobData.safeParse(job.data);
    const written = await recordUnrunAttempt(
      { client: deps.main, keys: deps.keys, retention: deps.retention ?? DEFAULT_RETENTION },
      job,
      {
        attempt,
        status: served ? "aborted" : "failed",
        reason,
        workerId: deps.worker.id,
        ...(data.success
          ? {
              publishProof: (runId: string) =>
                publishedByRun(deps, { runId, rebuild: data.data.rebuild, tenant: data.data.tenant ?? null }),
            }
          : {}),
      },
    ).catch((error: unknown) => `not written: ${String(error)}`);
    log(
      typeof written === "string"
        ? `job ${job.id}: ${reason}; its record ${written}`
        : written.begun.status === "exists"
          ? `job ${job.id}: ${reason}; not recorded: run ${written.runId} exists (${written.begun.recordStatus})`
          : `job ${job.id}: ${reason} (${written.runId}: ${written.begun.status})`,
    );
  };
  worker.on("error", (error) => log(`worker error: ${error.message}`));
  cancels.start();
  worker.on("closed", () => cancels.stop());
  const abortAll = (reason: string) => {
    allAbortedFor = reason;
    for (const jobId of pickups.keys()) abortJob(jobId, reason);
  };
  const settleGivenUp = async () => {
    for (const pending of givingUp) pending.hurry = true;
    await Promise.all([...givingUp].map((pending) => pending.done));
  };
  return {
    worker,
    running: { ids: () => [...pickups.keys()], processed: () => processed, abortAll, settleGivenUp },
  };
}
