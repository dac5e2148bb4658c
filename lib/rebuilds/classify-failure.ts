/**
 * What a failure of an attempt means: the final status of its record, whether another attempt
 * can help, whether the job goes back to the queue without a failed attempt (shutdown), and
 * whether "already rebuilt" must be forgotten. Pure: the orchestration applies it.
 */
import { ClaimLostError } from "../claims";
import type { FinalRunStatus } from "../runs/transitions";
import { CANCEL_ABORT_REASON } from "./cancel-request";
import { FenceNotRecordedError, RunNotListedError } from "./published-fence";
import { LOCK_LOST_ABORT_REASON, StepFailedError, TransientStepError, WorkerStalledError } from "./steps/context";
import { TRANSIENT_ERRNO } from "./steps/run-step";
import { allRepliesSay } from "../redis/unavailable";

export type FailureClass =
  | { kind: "hand-back"; status: "aborted"; reason: string }
  /** An operator cancelled the job: whatever else went wrong meanwhile (a lost claim), it ends here. */
  | { kind: "cancelled"; reason: string }
  /**
   * The claim was lost while the attempt ran (a force release, an expiry, a takeover). Whether
   * the request may end depends on who holds the output now and whether the version was
   * published meanwhile: the orchestration looks (`RebuildAttempt.afterLostClaim`).
   */
  | { kind: "claim-lost"; reason: string }
  | {
      kind: "fail";
      status: FinalRunStatus;
      reason: string;
      /** The error message for BullMQ. */
      message: string;
      /** Another attempt may succeed. */
      retry: boolean;
      /** The version may not stay marked as rebuilt. */
      forgetRebuilt: boolean;
    };

/**
 * How the reason of an attempt that lost its BullMQ job lock ends: the worker then asks whether
 * the queue's Redis still has the job (run-rebuild.ts `lostJobReason`) and says otherwise.
 */
export const JOB_REDELIVERED = "the job is redelivered";

export function classifyFailure(
  error: unknown,
  context: { jobSignal: AbortSignal; timeLimitMs: number },
): FailureClass {
  const jobReason = context.jobSignal.aborted ? String(context.jobSignal.reason ?? "") : "";
  if (jobReason === "shutdown") {
    return { kind: "hand-back", status: "aborted", reason: "worker shutdown: job handed back to the queue" };
  }
  if (jobReason === CANCEL_ABORT_REASON) return { kind: "cancelled", reason: "cancelled by an operator" };
  if (error instanceof ClaimLostError) return { kind: "claim-lost", reason: `claim lost: ${error.message}` };
  // The job lock is gone (this pickup's token is refused): the job is BullMQ's to redeliver. The
  // reason names the stall when the step warden ended the step for it (its cause).
  if (jobReason === LOCK_LOST_ABORT_REASON) {
    return {
      kind: "fail",
      status: "aborted",
      reason:
        error instanceof WorkerStalledError
          ? `${error.message}; its BullMQ job lock ran out meanwhile: ${JOB_REDELIVERED}`
          : `BullMQ job lock lost (the worker stalled, or its Redis restarted or failed over); ${JOB_REDELIVERED}`,
      message: "job lock lost",
      retry: true,
      forgetRebuilt: false,
    };
  }
  // The worker stalled (not the job's fault): back to the queue without a failed attempt; if
  // the lock has run out meanwhile, the attempt BullMQ already handed it to goes on.
  if (error instanceof WorkerStalledError) {
    return { kind: "hand-back", status: "aborted", reason: `${error.message}; the job is handed back to the queue` };
  }
  // Failed, not aborted: nothing outside stopped it, and the job ends here (not retried), so the
  // history, the failed-runs count and the runFailed alert must see it (black-box helper-167: a
  // rebuild that timed out every night was recorded aborted, and no alert fired).
  if (isTimeout(error)) {
    const reason = `time limit of ${context.timeLimitMs} ms exceeded (a time limit is not retried): the job failed`;
    return { kind: "fail", status: "failed", reason, message: reason, retry: false, forgetRebuilt: true };
  }
  const retry = isTransient(error);
  const message = error instanceof Error ? error.message : String(error);
  return {
    kind: "fail",
    status: "failed",
    reason: `${retry ? "transient: " : ""}${message}`,
    message,
    retry,
    forgetRebuilt: true,
  };
}

function isTimeout(error: unknown): boolean {
  return error instanceof DOMException && error.name === "TimeoutError";
}

/**
 * Worth another attempt: declared transient exit codes, transient errno codes, a publish whose
 * fence the disk did not take (published-fence.ts), a Redis that is
 * briefly away (ioredis reports a restart or a stall without an errno code), and Redis error
 * replies that mean "later": persistence failing (MISCONF), memory full (OOM), a busy script
 * (BUSY), too few replicas (NOREPLICAS), loading or read-only after a failover, cluster moves —
 * also when a script raised them (older Redis wraps them in "ERR Error running script …").
 */
export function isTransient(error: unknown): boolean {
  if (
    error instanceof TransientStepError ||
    error instanceof FenceNotRecordedError ||
    error instanceof RunNotListedError
  )
    return true;
  if (error instanceof StepFailedError) return false;
  const code = (error as NodeJS.ErrnoException | undefined)?.code;
  if (typeof code === "string" && TRANSIENT_ERRNO.has(code)) return true;
  const name = error instanceof Error ? error.name : "";
  const message = error instanceof Error ? error.message : "";
  if (name === "MaxRetriesPerRequestError") return true;
  if (/^(Command timed out|Connection is closed|Stream isn't writeable)/.test(message)) return true;
  // A transaction Redis discarded (EXECABORT) is transient when every error that made it is.
  return name === "ReplyError" && allRepliesSay(error, REDIS_LATER);
}

/** A Redis error code meaning "later", at the start of the reply or after a script's wrapping. */
const REDIS_LATER = /(^|[:\s]-?)(MISCONF|OOM|BUSY|NOREPLICAS|LOADING|READONLY|TRYAGAIN|CLUSTERDOWN|MASTERDOWN)\b/;
