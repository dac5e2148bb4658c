/**
 * One attempt of one rebuild job — the orchestration (the BullMQ wiring is in worker/):
 *
 *  1. the attempt's record begins at once, whatever follows (`beginAttempt`, one round trip):
 *     a job that cannot run (bad data, unreadable inputs) still leaves a failed record, and the
 *     job's previous attempt, if still in flight, is closed as aborted;
 *  2. version = the trigger's, else the hash of the inputs; already rebuilt within the
 *     idempotency TTL → skipped "already-rebuilt" by that same script, without the claim (the
 *     script also reads the job's cancel request: a cancelled job ends cancelled instead; and
 *     it writes the record's event and, for a final status, the run counters);
 *  3. the claim, named for the output (+ tenant); what to do when it is held comes from
 *     `decideRun` (skip, defer, take over), as in the "Rebuild now" preview;
 *  4. steps, build and fenced publish (`build-and-publish.ts`);
 *  5. the final record with the idempotency key in one script, written while the claim is still
 *     held when the build was published (one round trip); failures are classified by
 *     `classify-failure.ts`; scheduled ticks are booked by `schedule-ticks.ts`.
 *
 * Expected outcomes are returned; failures are thrown as `RebuildError` with `retry` telling
 * whether another attempt can help.
 */
import { setTimeout as sleep } from "node:timers/promises";
import crypto from "node:crypto";
import path from "node:path";
import type { Redis } from "ioredis";
import {
  ClaimLostError,
  claimName,
  readClaim,
  readClaimTrail,
  readPublished,
  recordSkip,
  withClaim,
  type ClaimHolder,
  type HeldClaim,
} from "../claims";
import { TRAIL_MAX } from "../redis/scripts";
import type { RedisKeys } from "../redis/keys";
import { redisClock } from "../redis/clock";
import { DEFAULT_RETENTION, publishingMark, runPlaceOf, type RunRetention } from "../runs/records";
import type { FinalRunStatus } from "../runs/transitions";
import { runIdOf, type RunRecord, type StepRecord } from "../runs/types";
import {
  beginAttempt,
  recordVersion,
  RunRecorder,
  writeRun,
  type AttemptIdentity,
  type BeginResult,
  type RunStore,
  type RunWrite,
  type VersionResult,
} from "../runs/writer";
import type { WorkerIdentity } from "../workers/heartbeat";
import {
  buildAndPublish,
  listedPublishesOf,
  publishRefusal,
  RUN_UNLISTED,
  type BuildResult,
} from "./build-and-publish";
import {
  CANCEL_ABORT_REASON,
  describeCancel,
  parseCancelRequest,
  UNREADABLE_CANCEL_REQUEST,
  type CancelRequest,
} from "./cancel-request";
import { recordChangedBuild } from "./build-integrity";
import { classifyFailure, JOB_REDELIVERED, isTransient } from "./classify-failure";
import { UNDECLARED_DEFER_MS, UNDECLARED_PICKUPS, wasDeclared } from "./declared";
import { decideRun, DEFER_MAX_MS, DEFER_MIN_MS } from "./decide";
import { outputDirOf, stopWithinMs, tenantProblem, type Definitions, type RebuildDefinition } from "./definitions";
import { PRUNING_VERSION } from "./prune";
import { publishedByRun } from "./published-by-run";
import { pinOutputClaim } from "./output-claim";
import { FenceNotRecordedError, readFenceFloor } from "./published-fence";
import { holderJobState, rebuildJobData, type RebuildJobData } from "./queue";
import { recordScheduledTick } from "./schedule-ticks";
import { confirmRebuiltHeld, rebuiltByNow } from "./rebuilt-by-now";
import { hashInputs, idempotencyKey } from "./version";
import { stepWarden } from "./steps/warden";
import { readRebuiltMark } from "../runs/rebuilt-mark";

/** Until when `held` is ours by its local deadline, on the main Redis's clock; null once lost. */
function heldUntilOf(held: HeldClaim): number | null {
  return held.signal.aborted ? null : redisClock.now() + held.msUntilDeadline();
}

export interface RebuildDeps {
  /** Main Redis: run records, idempotency keys. */
  main: Redis;
  /** Claims Redis: claims, fences, published pointers, skip counts. */
  claims: Redis;
  keys: RedisKeys;
  definitions: Definitions;
  worker: WorkerIdentity;
  retention?: RunRetention;
  /** Worker log (stdout); run logs go to Redis. */
  log?: (line: string) => void;
  /** How long the inputs are read before the record begins anyway (default INPUTS_VISIBLE_AFTER_MS). */
  inputsVisibleAfterMs?: number;
}

export interface RebuildJob {
  id: string;
  /** 1 for the first attempt; BullMQ's attemptsStarted. */
  attempt: number;
  /** When the job was created (ms). */
  createdAt: number;
  data: unknown;
  /**
   * BullMQ's job signal: aborted on shutdown ("shutdown"), a lost job lock ("lock-lost") or an
   * operator's cancel ("cancelled", see cancel-request.ts).
   */
  signal: AbortSignal;
  /** The cancel request behind a "cancelled" abort (who and why), when the worker has it. */
  cancelRequest?: () => CancelRequest | null;
  /**
   * Looks for a cancel request now (not at the next poll) and, if there is one, aborts `signal`
   * with "cancelled": called just before the fenced publish, so a holder that was paused past an
   * operator's cancel does not publish on waking.
   */
  checkCancel?: () => Promise<void>;
  /**
   * A cancel request this attempt found itself (its first record write reads the job's cancel
   * key): the worker notes it as its watch would, so the request is reported once.
   */
  cancelFound?: (request: CancelRequest) => void;
  /**
   * Whether this attempt still holds BullMQ's job lock (asked, not remembered: the lock is in
   * Redis). Absent: unknown, and the attempt acts as if it does (it keeps the request).
   */
  ownsLock?: () => Promise<boolean>;
  /**
   * A failure of this attempt that asks for a retry is the job's last (BullMQ fails the job):
   * its record says so. Absent: unknown, nothing said.
   */
  lastTry?: { attempt: number; of: number } | null;
  progress?: (fraction: number) => void;
  /**
   * Asked once this pickup has lost its job lock: whether the queue's Redis still has the job,
   * and when it has lost it (a crash or a failover that lost its last writes: nothing would
   * redeliver it), queues its request again. Absent: not asked (the record says "redelivered").
   */
  requeueIfLost?: () => Promise<LostJobCheck>;
}

/** What `requeueIfLost` found. */
export type LostJobCheck =
  | { kind: "present" }
  /** Gone on purpose: its cancel request is there, or a later attempt's record (finished elsewhere and trimmed). */
  | { kind: "removed" }
  /** Gone without either (Redis lost writes): its request queued again, or joined to a waiting job. */
  | { kind: "requeued"; jobId: string; joined: boolean }
  /** The job is gone and its request could not be queued again (`why`), or the check failed. */
  | { kind: "unknown"; why: string };

/**
 * The reason of an attempt that lost its job lock (`classifyFailure`: "… the job is redelivered"),
 * as it is: the job still queued, redelivered by BullMQ; gone from the queue's Redis (helper-151:
 * the record said "redelivered" while nothing would run it again), its request queued again.
 */
/** The job's lookup in the queue's Redis (`requeueIfLost`); null when the job cannot be looked up. */
async function lookUpJob(job: RebuildJob): Promise<LostJobCheck | null> {
  if (!job.requeueIfLost) return null;
  return job.requeueIfLost().catch((error: unknown): LostJobCheck => ({ kind: "unknown", why: String(error) }));
}

async function lostJobReason(job: RebuildJob, reason: string): Promise<{ reason: string; requeued: boolean }> {
  const check = reason.endsWith(JOB_REDELIVERED) ? await lookUpJob(job) : null;
  if (!check || check.kind === "present") return { reason, requeued: false };
  const head = reason.slice(0, -JOB_REDELIVERED.length);
  if (check.kind === "removed") {
    return {
      reason: `${head}the job is no longer in the queue (cancelled, or finished by another pickup and removed since): not run again`,
      requeued: false,
    };
  }
  return check.kind === "requeued"
    ? {
        reason: `${head}the job itself is gone from the queue's Redis (it lost its last writes): its request ${check.joined ? "joined waiting job" : "was queued again as job"} ${check.jobId}`,
        requeued: true,
      }
    : {
        reason: `${head}the job is redelivered if the queue's Redis still has it (${check.why}): if this job is not run again, trigger the rebuild again`,
        requeued: false,
      };
}

export type RebuildOutcome =
  | { status: "rebuilt"; runId: string; version: string; buildHash: string; fence: number }
  | { status: "skipped"; reason: "already-rebuilt" | "claim-held"; runId: string; version: string; heldBy?: string }
  | { status: "superseded"; runId: string; version: string; fence: number; newestFence: number }
  /**
   * Run again at `until` (worker: moveToDelayed): another version holds the output, or another
   * pickup has this attempt's record. `note`: why, when no run record says it (the worker leaves
   * it for the queue view).
   */
  | { status: "deferred"; until: number; heldBy: string; version: string; note?: string }
  /** The worker is shutting down: give the job back (worker: moveToWait). */
  | { status: "handed-back"; runId: string }
  /** An operator cancelled the job: recorded `cancelled`; never retried (worker: UnrecoverableError). */
  | { status: "cancelled"; runId: string; reason: string };

/** Why the attempt must stop for an operator's cancel, or null when nobody cancelled it. */
function cancellationOf(job: RebuildJob): string | null {
  if (!job.signal.aborted || job.signal.reason !== CANCEL_ABORT_REASON) return null;
  const request = job.cancelRequest?.();
  return describeCancel(request ?? UNREADABLE_CANCEL_REQUEST);
}

/**
 * An attempt whose RUN_BEGIN found the job's cancel request (and recorded it cancelled, or wrote
 * nothing because the record exists): the worker notes the request, the attempt ends cancelled.
 */
function cancelledAtBegin(
  job: RebuildJob,
  runId: string,
  begun: { cancelRequest: string | null; reason?: string },
): Extract<RebuildOutcome, { status: "cancelled" }> {
  const request = parseCancelRequest(begun.cancelRequest) ?? UNREADABLE_CANCEL_REQUEST;
  const reason = begun.reason ?? describeCancel(request);
  job.cancelFound?.(request);
  return { status: "cancelled", runId, reason };
}

/**
 * This attempt's record is not this pickup's to write (`what` says why): someone ended it (the
 * job's next attempt closed it: this pickup lost its job lock; the abandoned-run sweep: its
 * worker stopped beating), or another pickup of this attempt has it (RUN_BEGIN's `exists`: final,
 * or in flight on a worker that still beats) or took it over. The pickup takes no claim,
 * publishes nothing and writes nothing more; the record stays as its writer leaves it (an
 * operator's cancel is ended there by that pickup's own cancel watch). What becomes of the job:
 * - cancelled when it has a cancel request, or when the record says cancelled;
 * - done (a skip) when the record says rebuilt: the build happened;
 * - else the request is kept: deferred (no attempt spent; the next pickup is a new attempt with
 *   its own record) — unless this pickup lost its job lock: then the job is another pickup's and
 *   this one only stops.
 */
async function recordNotOurs(
  job: RebuildJob,
  runId: string,
  found: { what: string; recordStatus: string; cancelRequest: string | null },
  version: string,
  log: (line: string) => void,
): Promise<Extract<RebuildOutcome, { status: "cancelled" | "skipped" | "deferred" }>> {
  const message = `the attempt's record ${found.what} (${found.recordStatus}): this pickup does not go on`;
  if (found.cancelRequest) {
    log(`${message}; the job has a cancel request`);
    return cancelledAtBegin(job, runId, { cancelRequest: found.cancelRequest });
  }
  if (found.recordStatus === "rebuilt") {
    log(`${message}; that pickup rebuilt it: done`);
    return { status: "skipped", reason: "already-rebuilt", runId, version };
  }
  if (found.recordStatus === "cancelled") {
    log(`${message}; it was cancelled`);
    return { status: "cancelled", runId, reason: `${message}; it was cancelled` };
  }
  const owns = job.ownsLock ? await job.ownsLock().catch(() => null) : null;
  if (owns === false) {
    log(`${message}; this pickup lost its job lock`);
    throw new RebuildError(`${message}; this pickup lost its job lock`, false, runId);
  }
  log(`${message}; deferred, the request is kept`);
  return {
    status: "deferred",
    until: Date.now() + DEFER_MIN_MS,
    heldBy: "another pickup of this attempt",
    version,
    note: `${message}; the request is kept`,
  };
}

/** How `recordNotOurs` names what RUN_BEGIN's `exists` and `ended` found. */
/** How long an attempt that lost its claim otherwise than by a release looks for one in the trail. */
const TRAIL_LOOK_MS = 500;
const EXISTS_WHAT = "is another pickup's of this attempt";
const ENDED_WHAT = "was ended by someone else";

/** The record answered, right before the publish, that it is not this pickup's any more: nothing is published. */
class RecordNotOursError extends Error {
  constructor(readonly answer: "not-owner" | "final") {
    super(
      `the attempt's record ${answer === "not-owner" ? "was taken over by another pickup" : "was closed by someone else"}`,
    );
    this.name = "RecordNotOursError";
  }

  get what(): string {
    return `${this.answer === "not-owner" ? "was taken over by another pickup of this attempt" : "was closed by someone else"} before the publish`;
  }
}

export class RebuildError extends Error {
  constructor(
    message: string,
    /** Another attempt may succeed (transient I/O, declared exit code, lost claim). */
    readonly retry: boolean,
    readonly runId: string | null,
    options?: {
      cause?: unknown;
      /** How its record ended when not `failed` (a superseded pickup): what the worker's log says. */
      ended?: FinalRunStatus;
    },
  ) {
    super(message, options);
    this.name = "RebuildError";
    this.ended = options?.ended ?? null;
  }

  readonly ended: FinalRunStatus | null;
}

/**
 * Inputs that take longer than this to read (large ones, a slow or hung mount): the attempt's
 * record begins while they are read (running, without a version), so the job shows in the run
 * history; the version is recorded on it once known (`recordVersion`). Faster reads keep the one
 * round trip that begins the record and checks the version together.
 */
export const INPUTS_VISIBLE_AFTER_MS = 1_000;

export { UNDECLARED_DEFER_MS, UNDECLARED_PICKUPS };

/** Why the input read is stopped when the record begun meanwhile is not this pickup's. */
const RECORD_NOT_OURS = "record-not-ours";

export async function runRebuild(deps: RebuildDeps, job: RebuildJob): Promise<RebuildOutcome> {
  const store: RunStore = { client: deps.main, keys: deps.keys, retention: deps.retention ?? DEFAULT_RETENTION };
  const runId = runIdOf(job.id, job.attempt);
  const log = (line: string) => deps.log?.(`[${runId}] ${line}`);
  const raw = (job.data ?? {}) as { rebuild?: unknown; tenant?: unknown; trigger?: unknown; retryOf?: unknown };
  const identity: AttemptIdentity = {
    ...runPlaceOf(raw.rebuild, raw.tenant),
    runId,
    jobId: job.id,
    attempt: job.attempt,
    previousRunId: job.attempt > 1 ? runIdOf(job.id, job.attempt - 1) : null,
    rebuildName: typeof raw.rebuild === "string" ? raw.rebuild.slice(0, 200) : "",
    createdAt: job.createdAt,
    trigger: raw.trigger === "schedule" || raw.trigger === "manual" ? raw.trigger : "api",
    workerId: deps.worker.id,
    host: deps.worker.host,
    ...(typeof raw.retryOf === "string" ? { retryOf: raw.retryOf.slice(0, 200) } : {}),
  };
  /** When the attempt began (local monotonic clock): a stall is measured from here, its input read included. */
  const attemptBegan = performance.now();
  /** The record's begin while the inputs were still being read (see INPUTS_VISIBLE_AFTER_MS), once made. */
  const reading: { begun: BeginResult | null } = { begun: null };
  /**
   * The attempt's one record when it ends before its record began: `null`, or the cancelled
   * outcome when the job has an operator's cancel request (RUN_BEGIN then records it cancelled
   * whatever `status` says, and the job is not retried).
   */
  const recordEarlyEnd = async (
    status: FinalRunStatus,
    reason: string,
  ): Promise<Extract<RebuildOutcome, { status: "cancelled" }> | null> => {
    const early = reading.begun;
    if (early?.status === "began") {
      // This attempt's record began while its inputs were read: it ends here, cancelled when the
      // job has an operator's cancel request. A record final already refuses the write.
      const cancelled = early.cancelRequest ? cancelledAtBegin(job, runId, early) : null;
      // One another pickup took over (its worker stopped beating meanwhile) is that pickup's to
      // end, a cancel included (its own cancel watch): not-owner, nothing written.
      const written = await writeRun(store, identity, {
        status: cancelled ? "cancelled" : status,
        fields: { reason: cancelled?.reason ?? reason },
        writeId: crypto.randomBytes(6).toString("hex"),
        owner: early.beginId,
      }).catch((error: unknown) => `not written (${String(error)})`);
      if (written !== "written") log(`recording the ${cancelled ? "cancelled" : status} attempt: ${written}`);
      return cancelled;
    }
    const begun = await beginAttempt(store, identity, { mode: { kind: "final", status, reason } }).catch(
      (error: unknown) => log(`recording the ${status} attempt failed: ${String(error)}`),
    );
    if (begun?.status === "cancelled") {
      log(`${reason}; the job was cancelled meanwhile: recorded cancelled, not retried`);
      return cancelledAtBegin(job, runId, begun);
    }
    if (begun?.status === "exists") {
      // This attempt's record is another pickup's (the queue's Redis forgot a pickup), final or
      // in flight on a live worker: RUN_BEGIN wrote nothing, and this pickup writes nothing over
      // it (that pickup ends it, an operator's cancel included). A cancel still ends this job.
      log(`${reason}; not recorded: the attempt's record ${EXISTS_WHAT} (${begun.recordStatus})`);
      if (begun.cancelRequest) return cancelledAtBegin(job, runId, begun);
      if (status === "cancelled") return { status: "cancelled", runId, reason };
    }
    return null;
  };
  /** A job that ends before it could start still leaves its record, then throws (unless it was cancelled meanwhile). */
  const failEarly = async (
    message: string,
    retry: boolean,
    cause?: unknown,
    status: FinalRunStatus = "failed",
  ): Promise<Extract<RebuildOutcome, { status: "cancelled" }>> => {
    const cancelled = await recordEarlyEnd(status, message);
    if (cancelled) return cancelled;
    throw new RebuildError(message, retry, runId, { cause });
  };

  /**
   * A job whose rebuild or tenant this worker's definitions do not declare. Queued by a process
   * whose definitions did (a rolling deploy: the trigger's server, or the worker that set up the
   * schedule, has the new file; this worker the old one), the request is kept for a worker that
   * knows it: deferred, no retry spent, for up to UNDECLARED_PICKUPS pickups (about 10 min), then
   * failed naming what to do. Declared by nobody (a job queued by hand): failed at once.
   */
  const undeclaredTarget = async (problem: string, data: RebuildJobData): Promise<RebuildOutcome> => {
    const declared = await wasDeclared(deps.main, deps.keys, data.rebuild, data.tenant);
    if (declared === false) return failEarly(problem, false);
    if (job.attempt >= UNDECLARED_PICKUPS) {
      return failEarly(
        `${problem}; queued by a process whose definitions declare it, but no worker that declares it took the job in ${UNDECLARED_PICKUPS} pickups (about ${Math.round((UNDECLARED_PICKUPS * UNDECLARED_DEFER_MS) / 60_000)} min): give the workers the definitions file that declares it, then retry the run`,
        false,
      );
    }
    // Redis not answering (null) is as good as declared here: the request is kept, a later pickup asks again.
    const reason = `${problem}: deferred, the request is kept for a worker whose definitions declare it (a deploy under way?); pickup ${job.attempt} of at most ${UNDECLARED_PICKUPS}`;
    log(reason);
    const cancelled = await recordEarlyEnd("deferred", reason);
    if (cancelled) return cancelled;
    return {
      status: "deferred",
      until: Date.now() + UNDECLARED_DEFER_MS,
      heldBy: "a worker whose definitions declare it",
      version: data.version ?? "",
    };
  };

  const parsed = rebuildJobData.safeParse(job.data);
  if (!parsed.success) return failEarly(`invalid job data: ${parsed.error.issues[0]?.message}`, false);
  const data = parsed.data;
  const definition = deps.definitions.rebuilds.get(data.rebuild);
  const undeclared = definition
    ? tenantProblem(definition, data.tenant)
    : `unknown rebuild '${data.rebuild}' (not in this worker's definitions file, ${deps.definitions.file})`;
  if (undeclared || !definition) return undeclaredTarget(undeclared ?? "", data);
  // Its publishes' lane is its output's (keys.rebuiltNow), whatever the rebuild is called.
  identity.lane = claimName(definition.claimPath, data.tenant);
  // A run of this job that this attempt's first record closes (the previous attempt, or an
  // earlier one in flight): whether it published (its final record then never written: a worker
  // stopped, Redis refused or lost the write), so that it is closed rebuilt, not aborted.
  identity.publishProof = (earlier: string) =>
    publishedByRun(deps, { runId: earlier, rebuild: data.rebuild, tenant: data.tenant ?? null });
  const cancelledBefore = cancellationOf(job);
  if (cancelledBefore) {
    // Cancelled before it started (found when the job was picked up): one record, no work.
    await beginAttempt(store, identity, {
      mode: { kind: "final", status: "cancelled", reason: cancelledBefore },
      ...(data.version ? { fields: { version: data.version } } : {}),
    });
    return { status: "cancelled", runId, reason: cancelledBefore };
  }

  /** What the job's abort means before the record began, as under the claim (`classifyFailure`). */
  const stoppedWhileHashing = async (error: unknown): Promise<RebuildOutcome> => {
    const failure = classifyFailure(error, { jobSignal: job.signal, timeLimitMs: definition.timeLimit });
    if (failure.kind === "cancelled") {
      const reason = cancellationOf(job) ?? failure.reason;
      return (await recordEarlyEnd("cancelled", reason)) ?? { status: "cancelled", runId, reason };
    }
    if (failure.kind === "hand-back") {
      return (await recordEarlyEnd(failure.status, failure.reason)) ?? { status: "handed-back", runId };
    }
    const message =
      failure.kind === "fail"
        ? (await lostJobReason(job, failure.reason)).reason
        : `stopped while its inputs were read: ${String(error)}`;
    return failEarly(
      message,
      failure.kind === "fail" ? failure.retry : true,
      error,
      failure.kind === "fail" ? failure.status : "aborted",
    );
  };

  const tick = recordScheduledTick(
    deps.main,
    deps.keys,
    { id: job.id, rebuild: data.rebuild, tenant: data.tenant },
    store.retention.maxAgeMs,
  ).catch((e: unknown) => log(`recording the scheduled tick failed: ${String(e)}`));
  /** The hash of the inputs; the record begins meanwhile when they take long to read. */
  const readInputs = async (): Promise<string> => {
    const stopRead = new AbortController();
    let begin: Promise<BeginResult | null> | null = null;
    const timer = setTimeout(() => {
      begin = beginAttempt(store, identity, {
        mode: { kind: "running" },
        ...(data.force
          ? {}
          : { pendingTrigger: deps.keys.pendingTrigger(data.rebuild, data.tenant, data.version, false) }),
      }).then(
        (begun) => {
          // The job has an operator's cancel request (recorded cancelled, or ended so when the
          // read stops): the read stops. So it does when the record is not this pickup's.
          if (begun.status === "cancelled" || begun.cancelRequest) stopRead.abort(CANCEL_ABORT_REASON);
          else if (begun.status === "exists" || begun.status === "ended") stopRead.abort(RECORD_NOT_OURS);
          return begun;
        },
        (error: unknown) => {
          log(`recording the attempt while its inputs are read failed: ${String(error)}`);
          return null;
        },
      );
    }, deps.inputsVisibleAfterMs ?? INPUTS_VISIBLE_AFTER_MS);
    try {
      return await hashInputs(definition.inputPaths, { signal: AbortSignal.any([job.signal, stopRead.signal]) });
    } finally {
      clearTimeout(timer);
      reading.begun = begin ? await begin : null;
    }
  };

  /**
   * What the begin made while the inputs were read ends, if anything: a cancel; a record that is
   * not this pickup's (another pickup of this attempt has it, or — the begin's reply lost, its
   * resend finding its record final — someone closed it): this pickup would build unrecorded.
   */
  const endedByEarlyBegin = (version: string) => {
    const begun = reading.begun;
    if (begun?.status === "cancelled") return cancelledAtBegin(job, runId, begun);
    if (begun?.status === "ended")
      return recordNotOurs(job, runId, { ...begun, what: ENDED_WHAT, recordStatus: "final" }, version, log);
    if (begun?.status === "exists") return recordNotOurs(job, runId, { ...begun, what: EXISTS_WHAT }, version, log);
    return null;
  };

  try {
    let version: string;
    try {
      version = data.version ?? (await readInputs());
    } catch (error) {
      const ended = endedByEarlyBegin(data.version ?? "(inputs not read)");
      if (ended) return await ended;
      // Stopped while its inputs were read (large ones, or one that never ends: a FIFO, a hung
      // mount): an operator's cancel, a shutdown or a lost job lock ends it here, not after the read.
      if (job.signal.aborted) return await stoppedWhileHashing(error);
      return await failEarly(`inputs unreadable: ${(error as Error).message}`, isTransient(error), error);
    }
    const ended = endedByEarlyBegin(version);
    if (ended) return await ended;
    const begun = reading.begun;
    return await new RebuildAttempt({
      deps,
      store,
      job,
      identity,
      data,
      definition,
      version,
      log,
      begunWhileReading: begun?.status === "began" ? begun.beginId : null,
      began: attemptBegan,
    }).run();
  } finally {
    await tick;
  }
}

/** What an attempt is made of once its version is known. */
interface AttemptOptions {
  deps: RebuildDeps;
  store: RunStore;
  job: RebuildJob;
  identity: AttemptIdentity;
  data: RebuildJobData;
  definition: RebuildDefinition;
  version: string;
  log: (line: string) => void;
  /** The beginId of the begin that made the record while the inputs were read (it gets the version, not a begin), or null. */
  begunWhileReading: string | null;
  /** When this attempt began (local monotonic clock): how long it has been stalled is measured from here. */
  began: number;
}

/** The attempt once its version is known: record begun, claim, build, final record. */
class RebuildAttempt {
  private readonly deps: RebuildDeps;
  private readonly store: RunStore;
  private readonly job: RebuildJob;
  private readonly identity: AttemptIdentity;
  private readonly data: RebuildJobData;
  private readonly definition: RebuildDefinition;
  private readonly version: string;
  private readonly log: (line: string) => void;
  private readonly begunWhileReading: string | null;
  private readonly began: number;
  private readonly claim: string;
  private readonly idemKey: string;
  private readonly recorder: RunRecorder;
  private readonly steps: StepRecord[] = [];

  constructor(options: AttemptOptions) {
    ({
      deps: this.deps,
      store: this.store,
      job: this.job,
      identity: this.identity,
      data: this.data,
      definition: this.definition,
      version: this.version,
      log: this.log,
      begunWhileReading: this.begunWhileReading,
      began: this.began,
    } = options);
    this.claim = claimName(this.definition.claimPath, this.data.tenant);
    this.idemKey = idempotencyKey(this.data.rebuild, this.data.tenant, this.version);
    this.recorder = new RunRecorder(this.store, this.identity, {
      onError: (error) => this.log(`run record write failed: ${String(error)}`),
    });
  }

  private get runId(): string {
    return this.identity.runId;
  }

  /** This attempt's lane, as its version's rebuilt mark is read (rebuilt-by-now.ts). */
  private lane() {
    return {
      rebuild: this.data.rebuild,
      tenant: this.data.tenant,
      idempotencyKey: this.idemKey,
      claim: this.claim,
      outputDir: outputDirOf(this.definition, this.data.tenant),
    };
  }

  async run(): Promise<RebuildOutcome> {
    const { deps, data, definition } = this;
    const fields = { version: this.version, idempotencyKey: this.idemKey };
    // A record that began while the inputs were read gets its version; one that is gone since
    // (Redis lost it: running records are never trimmed) begins again, as if it never had.
    const early = this.begunWhileReading;
    this.recorder.ownedBy(early ?? undefined);
    const versioned = early ? await this.recordVersion(fields, early) : null;
    if (versioned) {
      if (versioned.status === "already-rebuilt") {
        return { status: "skipped", reason: "already-rebuilt", runId: this.runId, version: this.version };
      }
      if (versioned.status === "cancelled") return cancelledAtBegin(this.job, this.runId, versioned);
      if (versioned.status === "closed" && versioned.recordStatus !== "missing") {
        return recordNotOurs(this.job, this.runId, { ...versioned, what: ENDED_WHAT }, this.version, this.log);
      }
      // Another pickup of this attempt took the record over while this one read its inputs (this
      // one's worker stopped beating meanwhile); this one does not go on.
      if (versioned.status === "foreign") {
        const takenOver = { ...versioned, what: "was taken over by another pickup of this attempt" };
        return recordNotOurs(this.job, this.runId, takenOver, this.version, this.log);
      }
    }
    if (!versioned || versioned.status === "closed") {
      const begun = await beginAttempt(this.store, this.identity, {
        mode: data.force ? { kind: "running" } : { kind: "check", idempotencyKey: this.idemKey },
        builds: this.idemKey,
        fields,
        ...(data.force
          ? {}
          : { pendingTrigger: deps.keys.pendingTrigger(data.rebuild, data.tenant, data.version, false) }),
      }).catch((error: unknown) => {
        // Without a record the attempt would run unseen: let BullMQ retry it once Redis answers.
        throw new RebuildError(`recording the attempt failed: ${String(error)}`, true, this.runId, { cause: error });
      });
      if (begun.status === "already-rebuilt") {
        return { status: "skipped", reason: "already-rebuilt", runId: this.runId, version: this.version };
      }
      // Every later write names this begin: once another pickup of this attempt takes the record
      // over (RUN_BEGIN), this one's writes are refused; an attempt whose record another pickup
      // ended already (exists) leaves it alone.
      this.recorder.ownedBy(begun.beginId);
      // A cancel that came while the job waited, or while another worker had it: the record's
      // first write found it and recorded the attempt cancelled; it stops here, before the claim.
      if (begun.status === "cancelled") return cancelledAtBegin(this.job, this.runId, begun);
      // A running or check begin ends only by a cancel; "ended" is a resend of it (the reply was
      // lost) that found the record it had begun final already: someone else closed it.
      if (begun.status === "ended") {
        const ended = { ...begun, what: ENDED_WHAT, recordStatus: "final" };
        return recordNotOurs(this.job, this.runId, ended, this.version, this.log);
      }
      // This attempt's record is another pickup's (the queue's Redis forgot a pickup, and the
      // same attempt was picked up again): ended, in flight on a live worker, or taken over from
      // this one. This pickup would build unrecorded: it stops (recordNotOurs says how).
      if (begun.status === "exists") {
        return recordNotOurs(this.job, this.runId, { ...begun, what: EXISTS_WHAT }, this.version, this.log);
      }
    }
    const cancelledEarly = cancellationOf(this.job);
    if (cancelledEarly) return this.endCancelled(cancelledEarly);

    let finalWritten = false;
    const underClaim = async () => {
      // A worker that stalled since the attempt began may have lost its job lock: it takes no
      // claim (the same job's next attempt may hold it), it hands the job back.
      try {
        stepWarden.throwIfStalled(this.began, "claim not taken");
      } catch (error) {
        return this.onFailure(error);
      }
      // The fence floor: the highest fence published (or marked granted for a publish) for this
      // output, from its durable record, read right before each acquire: the grant is above it
      // even when the claims Redis forgot its counter (published-fence.ts). An older read could
      // miss a publish made meanwhile by a holder whose writes the claims Redis then lost, and
      // the grant would reuse its fence. A record that cannot be read (a failing disk) is no
      // floor: the attempt fails as transient.
      let fenceFloor: number;
      try {
        // The directory is this claim's, not another path's to it (output-claim.ts).
        await pinOutputClaim(
          outputDirOf(definition, data.tenant),
          this.claim,
          data.tenant ? path.join(definition.claimPath, data.tenant) : definition.claimPath,
        );
        fenceFloor = await readFenceFloor(outputDirOf(definition, data.tenant));
      } catch (error) {
        return this.onFailure(error);
      }
      return withClaim(
        deps.claims,
        deps.keys,
        this.claim,
        {
          workerId: deps.worker.id,
          jobId: this.job.id,
          attempt: this.job.attempt,
          runId: this.runId,
          rebuild: data.rebuild,
          tenant: data.tenant,
          version: this.version,
          // An operator's force release keeps others out this long past our TTL (unless we
          // acknowledge sooner): our steps are SIGKILLed when their grace ends.
          stopWithinMs: stopWithinMs(definition),
        },
        async (held) => {
          // The version's rebuilt mark and the job's mark, read together once the claim is
          // granted (one round trip): what buildAndPublish asks of each below.
          let reads: ReturnType<typeof readRebuiltMark> | undefined;
          const startReads = () =>
            (reads ??= readRebuiltMark(deps.main, deps.keys, this.lane(), deps.keys.askedAgain(this.job.id)));
          const built = await buildAndPublish({
            claims: deps.claims,
            keys: deps.keys,
            definition,
            tenant: data.tenant,
            version: this.version,
            runId: this.runId,
            jobId: this.job.id,
            // Listed once it published: finished, unless its record says failed (the disk refused
            // its fence record: retried) or deferred (its fence was granted twice and another
            // build recorded with it: it runs again); aborted, running or gone (a crash of this
            // Redis took it and the job's completion) is finished. A lookup that fails
            // counts as not finished (the attempt builds: a repeat, not a lost request).
            publishFinished: async (runId) => {
              if (runId === this.runId) return true; // its record and pickup went with the crash
              const [status, reason] = await deps.main
                .hmget(deps.keys.run(runId), "status", "reason")
                .catch(() => ["lookup-failed", null]);
              if (status === "failed" && reason?.includes(RUN_UNLISTED)) return "unlisted";
              return status !== "failed" && status !== "deferred" && status !== "lookup-failed";
            },
            jobMark: async () => (await startReads()).alongside,
            held,
            jobSignal: this.job.signal,
            attemptBegan: this.began,
            recorder: this.recorder,
            steps: this.steps,
            ...(this.job.progress ? { progress: this.job.progress } : {}),
            beforePublish: (publishing) => this.beforePublish(publishing),
            // Checked again under the claim: another run may have finished this version since
            // the record began. Asked once the claim is granted (a run that released it had
            // marked the version first), alongside the work dir's creation. A failed lookup
            // counts as "not rebuilt": the claim keeps the repeat harmless.
            ...(data.force
              ? {}
              : {
                  // A mark of an earlier incarnation of the main Redis counts only if the
                  // claims Redis's pointer still names its run (rebuilt-by-now.ts).
                  alreadyRebuiltBy: () =>
                    startReads().then(
                      ({ mark }) =>
                        confirmRebuiltHeld(deps, this.lane(), mark, {
                          fence: held.fence,
                          heldUntil: () => heldUntilOf(held),
                        }).catch(() => null),
                      () => null,
                    ),
                }),
            onChangedBuild: (found) =>
              recordChangedBuild(deps.main, deps.keys, {
                ...found,
                rebuild: data.rebuild,
                tenant: data.tenant ?? null,
                foundAt: Date.now(),
                foundBy: deps.worker.id,
              }).catch((e: unknown) => this.log(`recording the changed build failed: ${String(e)}`)),
          });
          if (built.status === "published") {
            // The final record while the claim is still held (withClaim releases it after this
            // returns), with the idempotency key in the same script: a duplicate that acquires
            // the freed claim finds the key and skips. When it fails (the main Redis away), it
            // is written again after the release, as a transient error would be.
            try {
              // The write counts as the lane's newest only if applied before the claim's local
              // deadline (a holder paused since its publish may have lost the claim to another
              // publish, in writes a main Redis crash could lose).
              await this.finishRebuilt(
                held.fence,
                built.buildHash,
                held.tookOverFrom,
                built.currentNote,
                heldUntilOf(held),
              );
              finalWritten = true;
            } catch (error) {
              this.log(`final record under the claim failed (written again after the release): ${String(error)}`);
            }
          }
          return built;
        },
        {
          ttlMs: definition.claim.ttl,
          refreshEveryMs: definition.claim.refreshEvery,
          ...(fenceFloor > 0 ? { fenceFloor } : {}),
          onEvent: (event) => {
            if (event.type === "refresh-listener-failed")
              this.log(
                `claim refreshed, but its holding mark could not be rewritten (the claim's local deadline stays): ${String(event.error)}`,
              );
            if (event.type === "refresh-error")
              this.log(`claim refresh failed (riding it out): ${String(event.error)}`);
            if (event.type === "release-failed") this.log(`claim release failed: ${event.outcome.status}`);
          },
        },
      ).catch((error: unknown) => this.onFailure(error));
    };
    let result = await underClaim();
    // A worker pruning old builds holds the claim for a moment (prune.ts): wait here rather
    // than deferring the job through the queue.
    for (let waits = 0; result.status === "held" && result.holder.version === PRUNING_VERSION && waits < 60; waits++) {
      await new Promise((resolve) =>
        setTimeout(resolve, Math.max(50, Math.min(result.status === "held" ? result.pttlMs : 0, 250))),
      );
      result = await underClaim();
    }

    if (result.status !== "held" && result.status !== "done") return result;
    if (result.status === "held") return this.onHeld(result.holder, result.pttlMs);
    const built = result.value as BuildResult;
    if (built.status === "already-rebuilt") {
      await this.finish("skipped", { reason: `already-rebuilt: already rebuilt by run ${built.rebuiltBy}` });
      return { status: "skipped", reason: "already-rebuilt", runId: this.runId, version: this.version };
    }
    if (built.status === "published-before") {
      if (built.runId === this.runId) return this.publishedByEarlierPickup();
      // A repeat: the queue's Redis lost that this job had finished (a crash, a failover). Its
      // build is not published again: another version may have been published since.
      await this.finish("skipped", {
        reason: `already-rebuilt: run ${built.runId} of this job published its build here before (the output's record of the runs that published); its completion was not recorded (the queue's Redis lost it, or its final record could not be written)`,
      });
      return { status: "skipped", reason: "already-rebuilt", runId: this.runId, version: this.version };
    }
    if (built.status === "fence-reused") {
      // Redis lost this publish's grant and gave the fence to another run, whose build is the
      // output's: this request is not done (not marked rebuilt), it runs again with a new fence.
      return this.afterLostClaim(
        `not published: fence ${result.fence} was granted twice (the claims Redis lost writes) and build ${built.recordedHash} was recorded with it first`,
        { fence: result.fence, buildHash: built.buildHash },
      );
    }
    if (built.status === "superseded") {
      // At its own fence, nothing newer granted or published: the claim stopped being this
      // attempt's (an operator's force release just before the publish, or an expiry) — said so,
      // and who released it (black-box helper-182: the record named its own fence as "a newer
      // holder"). A grant the claims Redis lost is said as such (review helper-183).
      const released = built.newestFence === result.fence && built.publishedFence < result.fence;
      const what = `publish refused on ${this.claim} (fence ${result.fence}): ${publishRefusal(result.fence, built)}${released ? await this.releaseNote(result.fence, false) : ""}`;
      return this.afterLostClaim(what, { fence: result.fence, buildHash: built.buildHash });
    }
    // The publish reset the consecutive skips (FENCED_PUBLISH).
    if (!finalWritten)
      await this.finishRebuilt(result.fence, built.buildHash, result.tookOverFrom, built.currentNote, null);
    return {
      status: "rebuilt",
      runId: this.runId,
      version: this.version,
      buildHash: built.buildHash,
      fence: result.fence,
    };
  }

  private async onHeld(holder: ClaimHolder, pttlMs: number): Promise<RebuildOutcome> {
    // A same-version holder carries this request only while its attempt is the one its job works
    // (holderJobState): one whose job lock is gone, or another attempt's (its worker paused
    // past the lock, the job redelivered and perhaps ended already), may end without building,
    // and two such skips, each trusting the other's ended attempt, lost a request (soak,
    // 2026-12-06). Then this job waits and builds.
    // Nor one whose job published this version here before (a redelivery, or the same run id
    // picked up again after the queue's Redis forgot it): it may end without publishing ("published
    // before") over a newer version published since — the soak lost three requests so (helper-154,
    // review helper-158). Listed before it took the claim: a later publish of an earlier pickup is
    // refused by its fence. Lists that cannot be read count as listed (this request waits).
    // Nor one whose job an operator is cancelling (holderJobState): it ends without building.
    const state =
      holder.version === this.version
        ? await holderJobState(this.deps.main, this.deps.keys, holder)
        : { worked: true, cancelling: false };
    const jobWorked = state.worked && !state.cancelling && !(await this.holderPublishedBefore(holder));
    const decision = decideRun({
      version: this.version,
      force: true, // the already-rebuilt rule was applied when the attempt began
      rebuiltBy: null,
      claim: { holder, pttlMs, jobWorked, cancelling: state.cancelling },
      jobId: this.job.id,
      attempt: this.job.attempt,
    });
    if (decision.action === "skip" && decision.reason === "claim-held") {
      const { heldBy } = decision;
      await Promise.all([
        recordSkip(this.deps.claims, this.deps.keys, this.claim).catch((e: unknown) =>
          this.log(`skip count failed: ${String(e)}`),
        ),
        this.finish("skipped", {
          reason: `claim-held: ${this.claim} is held by ${heldBy} (job ${holder.jobId ?? "?"}) building the same version`,
        }),
      ]);
      return { status: "skipped", reason: "claim-held", runId: this.runId, version: this.version, heldBy };
    }
    if (decision.action === "defer") {
      const cancelled = cancellationOf(this.job);
      if (cancelled) return this.endCancelled(cancelled);
      const reason = decision.releasing
        ? `waits ${Math.round(decision.waitMs / 1000)} s: ${this.claim} was force-released and its holder ${decision.heldBy} is stopping`
        : decision.cancelling
          ? `waits ${Math.round(decision.waitMs / 1000)} s: ${this.claim} is held by ${decision.heldBy} (job ${holder.jobId ?? "?"}), whose job is being cancelled: it builds nothing, so this request builds once it has stopped`
          : `waits ${Math.round(decision.waitMs / 1000)} s: ${this.claim} is held by ${decision.heldBy} building ${decision.heldVersion ?? "?"}`;
      this.log(`deferred: ${reason}`);
      await this.finish("deferred", { reason });
      return {
        status: "deferred",
        until: Date.now() + decision.waitMs,
        heldBy: decision.heldBy,
        version: this.version,
      };
    }
    if (decision.action === "superseded") return this.onLaterAttempt(holder, pttlMs);
    // The acquire script takes a claim over from an earlier attempt of the same job and grants a
    // free one: a "held" reply should mean skip, defer or superseded. Should the two ever
    // disagree, the request is kept: look again shortly, with a record that says why.
    const reason = `claim ${this.claim} held by ${holder.workerId ?? "?"} (job ${holder.jobId ?? "?"}), but the decision was ${decision.action}; looking again`;
    this.log(`deferred: ${reason}`);
    await this.finish("deferred", { reason });
    return {
      status: "deferred",
      until: Date.now() + DEFER_MIN_MS,
      heldBy: holder.workerId ?? "?",
      version: this.version,
    };
  }

  /**
   * The claim was lost (force release, expiry, takeover, or a refused publish). The rule: only a
   * later attempt of this same job, or a publish of this version, may end the request; any
   * other loss defers the job (moveToDelayed: no retry is spent, so no number of force releases
   * can exhaust its attempts) until the output is free.
   */
  private async afterLostClaim(what: string, fields: Partial<RunRecord> = {}): Promise<RebuildOutcome> {
    const { deps } = this;
    const [claim, rebuiltBy] = await Promise.all([
      readClaim(deps.claims, deps.keys, this.claim).catch(() => null),
      // A forced request asked for a build whatever was rebuilt before it: only its own job ends it.
      this.data.force ? null : rebuiltByNow(deps, this.lane()).catch(() => null),
    ]);
    // A force-released claim still waiting for its holder to stop (this very attempt, when its
    // release did not get through, or an earlier one) carries no request on: it is not a later
    // attempt holding the output, only a name not free yet. Look again once it is.
    // Nor is this attempt's own claim, back after its release was lost (a Redis crash, a failover).
    const live = claim && !claim.revoked && claim.holder.runId !== this.runId ? claim : null;
    const decision = decideRun({
      version: this.version,
      force: this.data.force,
      rebuiltBy: rebuiltBy && rebuiltBy !== this.runId ? rebuiltBy : null,
      claim: live ? { holder: live.holder, pttlMs: live.pttlMs } : null,
      jobId: this.job.id,
      attempt: this.job.attempt,
    });
    // A later attempt of this job holds the output. (An earlier one — it took the name while it
    // was free: an expiry, a claims Redis that lost the takeover — carries nothing on: this
    // attempt defers below, and the next pickup takes the claim over.)
    if (decision.action === "superseded" && live) return this.onLaterAttempt(live.holder, live.pttlMs, what, fields);
    if (decision.action === "skip" && decision.reason === "already-rebuilt") {
      await this.finish("skipped", {
        ...fields,
        reason: `already-rebuilt: ${what}; meanwhile run ${decision.rebuiltBy} published this version`,
      });
      return { status: "skipped", reason: "already-rebuilt", runId: this.runId, version: this.version };
    }
    // An operator's cancel ends the request here (this job's version only; other jobs keep theirs).
    const cancelled = cancellationOf(this.job);
    if (cancelled) return this.endCancelled(cancelled, fields);
    // Free, held by another version, or by another job building this version (which may lose
    // its claim too): look again later. The next attempt applies the usual rules.
    const waitMs =
      decision.action === "defer" || decision.action === "skip"
        ? decision.pttlMs + 100
        : claim && !live
          ? claim.pttlMs + 100
          : 0;
    const until = Date.now() + Math.max(DEFER_MIN_MS, Math.min(DEFER_MAX_MS, waitMs));
    const heldBy = claim ? (claim.holder.workerId ?? claim.holder.host ?? "another worker") : "nobody";
    // The job itself may be gone with the claim (a Redis restart that lost both: black-box
    // helper-174): looked up now, as the worker does before it defers, so the record names where
    // the request went (the worker's own ask gets the same answer).
    const check = await lookUpJob(this.job);
    if (check?.kind === "removed") {
      const reason = `${what}; the job is no longer in the queue (cancelled, or finished by another pickup and removed since): not run again`;
      this.log(reason);
      await this.finish("aborted", { ...fields, reason });
      return { status: "deferred", until, heldBy, version: this.version };
    }
    const reason =
      check?.kind === "requeued"
        ? `${what}; the job itself is gone from the queue's Redis (it lost its last writes): its request ${check.joined ? "joined waiting job" : "was queued again as job"} ${check.jobId}`
        : `${what}; deferred, the request is kept (output held by ${heldBy})`;
    this.log(reason);
    await this.finish("deferred", { ...fields, reason }).catch((error: unknown) => {
      throw new RebuildError(`recording the deferral failed: ${String(error)}`, true, this.runId, { cause: error });
    });
    return { status: "deferred", until, heldBy, version: this.version };
  }

  /**
   * A later attempt of this job holds the claim. If this attempt lost its BullMQ job lock (the
   * job was picked up again), the later one carries the request on: this one ends `superseded`,
   * without a retry (BullMQ refuses a stale attempt's moves anyway). If it still holds the lock,
   * the attempt numbers went backwards (the queue's Redis lost pickups: a restart from an older
   * snapshot, a failover) and the holder is the stale one: defer, never fail the request — the
   * next pickup is numbered higher, or the stale holder's claim ends.
   */
  private async onLaterAttempt(
    holder: ClaimHolder,
    pttlMs: number,
    what = "claim held",
    fields: Partial<RunRecord> = {},
  ): Promise<RebuildOutcome> {
    const heldBy = `attempt ${holder.attempt ?? "?"} on ${holder.workerId ?? holder.host ?? "another worker"}`;
    const owns = this.job.ownsLock ? await this.job.ownsLock().catch(() => null) : null;
    if (owns === false) {
      const reason = `${what}: a later attempt of this job (${heldBy}) holds ${this.claim}; this attempt lost its job lock and ends`;
      await this.finish("superseded", { ...fields, reason });
      throw new RebuildError(reason, false, this.runId, { ended: "superseded" });
    }
    const waitMs = Math.max(DEFER_MIN_MS, Math.min(DEFER_MAX_MS, pttlMs + 100));
    const reason = `${what}; deferred, the request is kept: ${this.claim} is held by ${heldBy} of this same job, numbered after this one although this attempt holds the job (the queue's Redis may have lost pickups)`;
    this.log(reason);
    await this.finish("deferred", { ...fields, reason });
    return { status: "deferred", until: Date.now() + waitMs, heldBy, version: this.version };
  }

  /**
   * The version on the record that began while the inputs were read (`recordVersion`). When it
   * cannot be written the record is ended, not left running (best effort: Redis may be away),
   * and the attempt is retried.
   */
  private async recordVersion(fields: Partial<RunRecord>, owner: string): Promise<VersionResult> {
    return recordVersion(this.store, this.identity, {
      fields,
      idempotencyKey: this.data.force ? null : this.idemKey,
      builds: this.idemKey,
      owner,
    }).catch(async (error: unknown) => {
      const message = `recording the attempt's version failed: ${String(error)}`;
      await writeRun(this.store, this.identity, {
        status: "failed",
        fields: { ...fields, reason: `${message}; retried` },
        writeId: crypto.randomBytes(6).toString("hex"),
        owner,
      }).catch((e: unknown) => this.log(`ending its record failed too: ${String(e)}`));
      throw new RebuildError(message, true, this.runId, { cause: error });
    });
  }

  /**
   * Right before the fenced publish, in one round trip: the job's cancel request is looked for now
   * (a holder paused past an operator's cancel must not publish on waking), and the record is
   * asked whether it is still this pickup's (the queued progress is sent, owner-checked): one taken over
   * by another pickup (this worker stopped beating meanwhile) or closed by someone else is not,
   * and a publish would leave a build the run history does not name. Main Redis away: the
   * publish goes on (the claim keeps it safe; the final record is written again later).
   */
  private async beforePublish(publishing: { fence: number; buildHash: string }): Promise<void> {
    // Written with the check: from now on nobody else calls this record aborted while this
    // worker beats (a pause between the publish and the final record is not a death).
    this.recorder.update({ publishing: publishingMark(publishing) });
    const synced = await this.recorder.sync().catch((error: unknown) => {
      this.log(`the record's owner check before the publish failed (publishing anyway): ${String(error)}`);
      return null;
    });
    // The cancel request came with it (one round trip); without it, asked on its own.
    if (!synced) await this.job.checkCancel?.();
    else if (synced.cancelRequest) {
      this.job.cancelFound?.(parseCancelRequest(synced.cancelRequest) ?? UNREADABLE_CANCEL_REQUEST);
    }
    if (synced?.result === "not-owner" || synced?.result === "final") throw new RecordNotOursError(synced.result);
  }

  /**
   * Who force-released this attempt's claim and why, from the claim trail (" by …"), or "". Also
   * when the attempt learnt of the loss otherwise: a holder paused past its TTL wakes to its own
   * deadline, not to the release (black-box helper-133: its record did not name the release).
   */
  private async forceReleasedBy(error: unknown): Promise<string> {
    if (!(error instanceof ClaimLostError)) return "";
    return this.releaseNote(error.fence, error.cause === "force-released");
  }

  /**
   * Who force-released the claim this attempt held at `fence`, from the claim trail: " (by …)"
   * when the attempt was told of the release, "; an operator had force-released it meanwhile (by
   * …)" when it learnt of the loss otherwise, "" when the trail names no release.
   */
  private async releaseNote(fence: number, told: boolean): Promise<string> {
    // Told of the release: among the newest entries. Otherwise (often a claims Redis that does not
    // answer) a longer look, bounded: the attempt's record and deferral must not wait on it.
    const read = readClaimTrail(this.deps.claims, this.deps.keys, this.claim, told ? 10 : TRAIL_MAX).catch(() => []);
    const giveUp = sleep(TRAIL_LOOK_MS, [] as Awaited<typeof read>, { ref: false });
    const trail = told ? await read : await Promise.race([read, giveUp]);
    const entry = trail.find((e) => e.kind === "force-released" && e.fence === fence);
    if (!entry) return "";
    const by = `by ${entry.by ?? "an operator"}${entry.reason ? `: “${entry.reason}”` : ""}; see the audit log and the claim trail`;
    return told ? ` (${by})` : `; an operator had force-released it meanwhile (${by})`;
  }

  /** Maps an error thrown under the claim to a final record and a `RebuildError` (or hand-back, or a deferral). */
  private async onFailure(
    error: unknown,
  ): Promise<Extract<RebuildOutcome, { status: "handed-back" | "deferred" | "skipped" | "cancelled" }>> {
    if (error instanceof RecordNotOursError && !cancellationOf(this.job)) {
      const found = { what: error.what, recordStatus: error.answer, cancelRequest: null };
      return recordNotOurs(this.job, this.runId, found, this.version, this.log);
    }
    const failure = classifyFailure(error, { jobSignal: this.job.signal, timeLimitMs: this.definition.timeLimit });
    if (failure.kind === "cancelled") return this.endCancelled(cancellationOf(this.job) ?? failure.reason);
    if (failure.kind === "hand-back") return this.handBack(failure.status, failure.reason);
    if (failure.kind === "claim-lost") {
      // A publish in the claims Redis before the loss was noticed (its fence refused by the disk).
      const published = error instanceof ClaimLostError && error.publishedBuildHash;
      const outcome = await this.afterLostClaim(
        failure.reason + (await this.forceReleasedBy(error)),
        published ? { buildHash: published } : {},
      );
      if (outcome.status === "deferred" || outcome.status === "skipped" || outcome.status === "cancelled")
        return outcome;
      throw new Error(`unexpected outcome after a lost claim: ${outcome.status}`);
    }
    // A publish whose fence the disk refused is in the claims Redis: the record names its build.
    const publishedInRedis = error instanceof FenceNotRecordedError ? { buildHash: error.buildHash } : {};
    // The job's last try: no retry follows, though the failure would allow one.
    const last = failure.retry ? this.job.lastTry : null;
    const told = await lostJobReason(this.job, failure.reason);
    const reason =
      last && !told.requeued
        ? `${told.reason}; no retry left (try ${last.attempt} of ${last.of}): the job failed`
        : told.reason;
    await this.finish(
      failure.status,
      { reason, ...publishedInRedis },
      failure.forgetRebuilt ? { change: "del", key: this.idemKey, ttlMs: 0 } : undefined,
    );
    throw new RebuildError(failure.message, failure.retry, this.runId, { cause: error });
  }

  /** Whether a run of the holder's job is listed as having published this version here (true when that read fails). */
  private async holderPublishedBefore(holder: ClaimHolder): Promise<boolean> {
    if (!holder.jobId) return false;
    const place = {
      claims: this.deps.claims,
      keys: this.deps.keys,
      claimName: this.claim,
      outputDir: outputDirOf(this.definition, this.data.tenant),
    };
    return listedPublishesOf(place, holder.jobId, this.version, { strict: true }).then(
      (listed) => listed.length > 0,
      () => true,
    );
  }

  /**
   * This very attempt published here before, in a pickup the queue's Redis forgot together with
   * its record (a failover to a replica that had not received them: helper-151 saw this pickup
   * record "skipped: run <itself> published its build here before", and no record said rebuilt).
   * One record stands for both pickups: rebuilt, with the fence and build of the claims Redis's
   * pointer when that pointer is still this run's; when a newer publish has moved it (so neither
   * is known here), skipped, saying that the earlier pickup of this attempt rebuilt it.
   */
  private async publishedByEarlierPickup(): Promise<RebuildOutcome> {
    const forgot = "the queue's Redis forgot that pickup and its record (a crash or a failover lost its last writes)";
    const pointer = await readPublished(this.deps.claims, this.deps.keys, this.claim).catch(() => undefined);
    if (pointer?.runId === this.runId && pointer.fence > 0 && pointer.value) {
      await this.finish(
        "rebuilt",
        {
          fence: pointer.fence,
          buildHash: pointer.value,
          reason: `published by an earlier pickup of this same attempt; ${forgot}: recorded again from the output's record of the runs that published and the claims Redis's pointer`,
        },
        { change: "set", key: this.idemKey, ttlMs: this.definition.idempotency.ttl, fence: pointer.fence },
      );
      return {
        status: "rebuilt",
        runId: this.runId,
        version: this.version,
        buildHash: pointer.value,
        fence: pointer.fence,
      };
    }
    await this.finish("skipped", {
      reason: `already-rebuilt: run ${this.runId} of this job published its build here before (the output's record of the runs that published): an earlier pickup of this same attempt, which rebuilt it; ${forgot}; its fence and build are not known here (${pointer === undefined ? "the claims Redis's pointer could not be read" : "the claims Redis's pointer names another publish now"})`,
    });
    return { status: "skipped", reason: "already-rebuilt", runId: this.runId, version: this.version };
  }

  /**
   * An operator's cancel: the steps were stopped (SIGTERM, SIGKILL after killGrace) and the claim
   * is released by withClaim before this record is written. Nothing was published, so the
   * idempotency key is not touched. A record another pickup took over is that pickup's to end
   * (its own cancel watch stops it): a write on its behalf could land between that pickup's last
   * cancel check and its publish, and call a published build cancelled.
   */
  private async endCancelled(
    reason: string,
    fields: Partial<RunRecord> = {},
  ): Promise<Extract<RebuildOutcome, { status: "cancelled" }>> {
    this.log(reason);
    const written = await this.recorder.finish("cancelled", {
      ...fields,
      reason,
      ...(this.steps.length ? { steps: this.steps } : {}),
    });
    if (written !== "written") this.log(`final record "cancelled" not written: the record is ${written}`);
    return { status: "cancelled", runId: this.runId, reason };
  }

  /**
   * The final record of a published build, with the version marked rebuilt (the idempotency key)
   * in the same script. A `current` the disk would not move to it is said in its reason: the run
   * published, but the output did not serve its build when it ended (black-box helper-124).
   * `heldUntil`: the claim is held until then (ms, main Redis clock), so a write applied before is
   * the lane's newest publish and its mark counts in this incarnation of the main Redis
   * (lib/runs/scripts.ts, REBUILT_MARK_LUA); null (sent after the release): it marks as the
   * lane's rules allow.
   */
  private finishRebuilt(
    fence: number,
    buildHash: string,
    tookOverFrom: { token: string; fence: number | null } | null,
    currentNote: string | undefined,
    heldUntil: number | null,
  ): Promise<void> {
    const reasons = [
      tookOverFrom ? "took over from an earlier attempt" : null,
      currentNote ? `published, but ${currentNote}` : null,
    ].filter((reason): reason is string => reason !== null);
    return this.finish(
      "rebuilt",
      { fence, buildHash, reason: reasons.length > 0 ? reasons.join("; ") : null },
      {
        change: "set",
        key: this.idemKey,
        ttlMs: this.definition.idempotency.ttl,
        fence,
        ...(heldUntil === null ? {} : { heldUntil }),
      },
    );
  }

  /**
   * The final record; a record another writer closed first stays as it is (logged). A record that
   * is gone (Redis lost it after it began: a restart from an older snapshot, a failover; running
   * records are never trimmed) is written again, begun and ended in one write, so the history
   * still says what this attempt did (its log lines before the loss are gone with it).
   */
  private async finish(
    status: FinalRunStatus,
    fields: Partial<RunRecord>,
    idempotency?: RunWrite["idempotency"],
  ): Promise<void> {
    const all = { ...fields, ...(this.steps.length ? { steps: this.steps } : {}) };
    const written = await this.recorder.finish(status, all, idempotency);
    if (written === "missing") return this.recordAgain(status, all);
    if (written !== "written") this.log(`final record "${status}" not written: the record is ${written}`);
  }

  /**
   * The job goes back to the queue (a stop, a deploy): its record ends `status`. A record Redis lost
   * since it began (a restart from an older snapshot) means the job may be lost with it — then
   * there is nothing to hand back, and the request would be gone (black-box helper-174): the job
   * is looked up first and, when gone (not by a cancel or another pickup), its request queued again
   * as a trigger queues it; the record written again says which.
   */
  private async handBack(
    status: FinalRunStatus,
    reason: string,
  ): Promise<Extract<RebuildOutcome, { status: "handed-back" }>> {
    const fields = { reason, ...(this.steps.length ? { steps: this.steps } : {}) };
    const written = await this.recorder.finish(status, fields);
    if (written === "missing") {
      const check = await lookUpJob(this.job);
      const said =
        check?.kind === "requeued"
          ? `worker shutdown: the job itself is gone from the queue's Redis (it lost its last writes), so there was nothing to hand back: its request ${check.joined ? "joined waiting job" : "was queued again as job"} ${check.jobId}`
          : check?.kind === "removed"
            ? "worker shutdown: the job is no longer in the queue (cancelled, or finished by another pickup and removed since): not handed back"
            : check?.kind === "unknown"
              ? `${reason}, if the queue's Redis still has it (${check.why}): if this job is not run again, trigger the rebuild again`
              : reason;
      await this.recordAgain(status, { ...fields, reason: said });
    } else if (written !== "written") {
      this.log(`final record "${status}" not written: the record is ${written}`);
    }
    return { status: "handed-back", runId: this.runId };
  }

  private async recordAgain(status: FinalRunStatus, fields: Partial<RunRecord>): Promise<void> {
    const lost = "its record was lost after it began (Redis lost writes) and written again at its end";
    const { reason, ...rest } = fields;
    // A failure throws, as the first write's would: under the claim, the rebuilt record is then
    // written again after the release (finishRebuilt's caller), not taken as written.
    const again = await beginAttempt(this.store, this.identity, {
      mode: { kind: "final", status, reason: reason ? `${reason}; ${lost}` : lost },
      fields: { version: this.version, idempotencyKey: this.idemKey, ...rest },
    }).catch((error: unknown) => {
      this.log(`final record "${status}": ${lost} (not written: ${String(error)})`);
      throw error;
    });
    this.log(`final record "${status}": ${lost} (${again.status})`);
  }
}
