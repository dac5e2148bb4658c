/** What a step gets to work with. Steps check `signal` and stop promptly when it aborts. */
export interface StepContext {
  signal: AbortSignal;
  /** The run's private work directory (`<output>/.work/<runId>-f<fence>-<token tail>`, one per claim grant). */
  workDir: string;
  /** The rebuild's output directory. */
  outputDir: string;
  /** Directory relative paths in the definition are resolved against. */
  baseDir: string;
  version: string;
  tenant: string | undefined;
  rebuild: string;
  runId: string;
  /**
   * The fencing token of the claim this run holds (`CLAIMWATCH_FENCE`): a step that writes to a
   * store of its own can pass it on, so the store refuses a write from an older holder.
   */
  fence: number;
  /** Appends one line to the run log (the log caps its length). */
  log(line: string): void;
  /** Reports progress of this step, 0..1. */
  progress(fraction: number): void;
  /**
   * When the attempt began (performance.now()): a step is not started if the worker stalled for
   * its warden's silence limit since then (`WorkerStalledError`). Absent: not checked.
   */
  attemptBegan?: number;
}

/** A failure worth retrying: a declared exit code, or an I/O error the OS calls transient. */
export class TransientStepError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "TransientStepError";
  }
}

/** The job signal's reason when BullMQ's job lock was lost (worker/rebuild-worker.ts aborts with it). */
export const LOCK_LOST_ABORT_REASON = "lock-lost";

/**
 * This worker stopped running long enough during the attempt (event loop blocked, process
 * SIGSTOPped) that its job lock may have run out: its steps were ended by the step warden, or
 * none is started. Not the job's failure: the job is handed back without spending an attempt.
 */
export class WorkerStalledError extends Error {
  constructor(
    message: string,
    /** When the warden killed the step, on the host's monotonic clock (warden.ts `monotonicNowMs`). */
    readonly killedAt?: number,
  ) {
    super(message);
    this.name = "WorkerStalledError";
  }
}

/** A failure that another attempt would repeat (bad exit code, bad input). */
export class StepFailedError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "StepFailedError";
  }
}

/** Replaces `{work} {output} {version} {tenant} {rebuild}` in one argument. Unknown braces stay. */
export function expandPlaceholders(text: string, context: StepContext): string {
  const values: Record<string, string> = {
    work: context.workDir,
    output: context.outputDir,
    version: context.version,
    tenant: context.tenant ?? "",
    rebuild: context.rebuild,
  };
  return text.replace(/\{(work|output|version|tenant|rebuild)\}/g, (_, name: string) => values[name]!);
}
