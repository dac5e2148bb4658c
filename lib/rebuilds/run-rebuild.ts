/**
 * One attempt of one rebuild job, step by step (the BullMQ wiring is in worker/):
 *
 *  1. version = the trigger's, else the hash of the inputs; idempotency key of (rebuild, tenant,
 *     version): already rebuilt → skipped "already-rebuilt" (unless forced), in one round trip
 *     that also writes the record, without taking the claim (already-rebuilt.ts);
 *  2. the claim, named for the output (+ tenant): held for the same version → skipped
 *     "claim-held"; held for another version → deferred until it ends; held by an earlier
 *     attempt of this job → taken over (claims engine);
 *  3. steps in `<output>/.work/<run>` under job signal + claim signal + time limit;
 *  4. the work dir becomes `<output>/builds/<content hash>`;
 *  5. fenced publish in Redis, then `<output>/current` follows;
 *  6. the run record is upserted at each change; on failure the idempotency key is deleted.
 *
 * Expected outcomes are returned; failures are thrown as `RebuildError` with `retry` telling
 * whether another attempt can help.
 */
import fs from "node:fs/promises";
import { countRunFinished } from "../metrics/counters";
import type { Redis } from "ioredis";
import {
  ClaimLostError,
  claimName,
  publishFenced,
  recordSkip,
  resetSkips,
  withClaim,
  type ClaimHolder,
  type HeldClaim,
} from "../claims";
import type { RedisKeys } from "../redis/keys";
import { upsertRun, upsertRunInto, RunLogWriter, type RunRetention, DEFAULT_RETENTION } from "../runs/records";
import { runIdOf, type RunRecord, type RunStatus, type StepRecord } from "../runs/types";
import type { WorkerIdentity } from "../workers/heartbeat";
import { outputDirOf, type Definitions, type RebuildDefinition } from "./definitions";
import { hashDirectory, pointCurrent, promoteBuild, workDirOf } from "./output";
import { rebuildJobData, scheduledTickOf, type RebuildJobData } from "./queue";
import { StepFailedError, TransientStepError, type StepContext } from "./steps/context";
import { runCommandStep, TRANSIENT_ERRNO } from "./steps/run-step";
import { runTilesStep } from "./steps/tiles-step";
import { hashInputs, idempotencyKey } from "./version";
import { skipIfAlreadyRebuilt } from "./already-rebuilt";

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
}

export interface RebuildJob {
  id: string;
  /** 1 for the first attempt; BullMQ's attemptsStarted. */
  attempt: number;
  /** When the job was created (ms). */
  createdAt: number;
  data: unknown;
  /** BullMQ's job signal: aborted on shutdown ("shutdown") or a lost job lock ("lock-lost"). */
  signal: AbortSignal;
  progress?: (fraction: number) => void;
}

export type RebuildOutcome =
  | { status: "rebuilt"; runId: string; version: string; buildHash: string; fence: number }
  | { status: "skipped"; reason: "already-rebuilt" | "claim-held"; runId: string; version: string; heldBy?: string }
  | { status: "superseded"; runId: string; version: string; fence: number; newestFence: number }
  /** Another version holds the output: run again at `until` (worker: moveToDelayed). */
  | { status: "deferred"; until: number; heldBy: string; version: string }
  /** The worker is shutting down: give the job back (worker: moveToWait). */
  | { status: "handed-back"; runId: string };

export class RebuildError extends Error {
  constructor(
    message: string,
    /** Another attempt may succeed (transient I/O, declared exit code, lost claim). */
    readonly retry: boolean,
    readonly runId: string | null,
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.name = "RebuildError";
  }
}

/** How long a deferred job waits before looking at the claim again, at most. */
const DEFER_MAX_MS = 30_000;
const DEFER_MIN_MS = 1_000;

export async function runRebuild(deps: RebuildDeps, job: RebuildJob): Promise<RebuildOutcome> {
  const parsed = rebuildJobData.safeParse(job.data);
  if (!parsed.success) {
    throw new RebuildError(`invalid job data: ${parsed.error.issues[0]?.message}`, false, null);
  }
  const data = parsed.data;
  const definition = deps.definitions.rebuilds.get(data.rebuild);
  if (!definition)
    throw new RebuildError(`unknown rebuild '${data.rebuild}' (not in the definitions file)`, false, null);
  if (definition.tenants ? !data.tenant || !definition.tenants.includes(data.tenant) : data.tenant) {
    throw new RebuildError(`rebuild '${data.rebuild}' has no tenant '${data.tenant ?? ""}'`, false, null);
  }
  return new RebuildAttempt(deps, job, data, definition).run();
}

class RebuildAttempt {
  private readonly runId: string;
  private readonly claim: string;
  private readonly retention: RunRetention;
  private readonly logWriter: RunLogWriter;
  private record: Pick<RunRecord, "id" | "rebuild" | "tenant" | "createdAt">;
  private readonly steps: StepRecord[] = [];
  /** Writes besides the record (schedule ticks); `finish` waits for them. */
  private pendingWrites: Promise<unknown>[] = [];
  /** The record update in flight (one at a time), and the fields queued behind it. */
  private recordWrite: Promise<void> | null = null;
  private queuedFields: Partial<RunRecord> | null = null;
  /** Set while `finish` builds the final MULTI: queued fields go into it instead of a write of their own. */
  private finishing = false;
  private version = "";
  private idemKey = "";
  private startedAt: number | null = null;

  constructor(
    private readonly deps: RebuildDeps,
    private readonly job: RebuildJob,
    private readonly data: RebuildJobData,
    private readonly definition: RebuildDefinition,
  ) {
    this.runId = runIdOf(job.id, job.attempt);
    this.claim = claimName(definition.outputPath, data.tenant);
    this.retention = deps.retention ?? DEFAULT_RETENTION;
    this.logWriter = new RunLogWriter(deps.main, deps.keys, this.runId, this.retention);
    this.record = { id: this.runId, rebuild: data.rebuild, tenant: data.tenant ?? null, createdAt: job.createdAt };
  }

  async run(): Promise<RebuildOutcome> {
    const { deps, data, definition } = this;
    this.recordTick();
    this.version = data.version ?? (await hashInputs(definition.inputPaths).catch((e) => this.failEarly(e)));
    this.idemKey = idempotencyKey(data.rebuild, data.tenant, this.version);

    if (!data.force) {
      const skipped = await this.skipIfAlreadyRebuilt();
      if (skipped) return skipped;
    }

    // Checked again with the claim, in the same round trip: another run may have finished this
    // version since. A failed lookup counts as "not rebuilt": the claim keeps the repeat harmless.
    const alreadyRebuilt: Promise<string | null> = data.force
      ? Promise.resolve(null)
      : deps.main.get(deps.keys.idempotency(this.idemKey)).catch(() => null);
    let earlySkip: string | null = null;
    const result = await withClaim(
      deps.claims,
      deps.keys,
      this.claim,
      {
        workerId: deps.worker.id,
        jobId: this.job.id,
        runId: this.runId,
        rebuild: data.rebuild,
        tenant: data.tenant,
        version: this.version,
      },
      async (held) => {
        earlySkip = await alreadyRebuilt;
        if (earlySkip) return null;
        return this.build(held);
      },
      {
        ttlMs: definition.claim.ttl,
        refreshEveryMs: definition.claim.refreshEvery,
        onEvent: (event) => {
          if (event.type === "refresh-error") this.log(`claim refresh failed (riding it out): ${String(event.error)}`);
          if (event.type === "release-failed") this.log(`claim release failed: ${event.outcome.status}`);
        },
      },
    ).catch((error: unknown) => this.classifyFailure(error));

    if (result.status === "handed-back") return result;
    if (result.status === "held") {
      await alreadyRebuilt;
      return this.onHeld(result.holder, result.pttlMs);
    }
    if (earlySkip) return this.finishSkipped("already-rebuilt", `already rebuilt by run ${earlySkip}`);
    const built = result.value!;
    if (built.status === "superseded") {
      await this.finish("superseded", {
        reason: `a newer holder (fence ${built.newestFence}) owns ${this.claim}; publish refused`,
        fence: result.fence,
        buildHash: built.buildHash,
      });
      return {
        status: "superseded",
        runId: this.runId,
        version: this.version,
        fence: result.fence,
        newestFence: built.newestFence,
      };
    }
    await Promise.all([
      this.finish(
        "rebuilt",
        {
          fence: result.fence,
          buildHash: built.buildHash,
          reason: result.tookOverFrom ? "took over from an earlier attempt" : null,
        },
        { setIdempotency: true },
      ),
      // Bookkeeping: a claims-Redis hiccup here must not turn a published rebuild into a failure.
      resetSkips(deps.claims, deps.keys, this.claim).catch((e: unknown) => this.log(`skip reset failed: ${String(e)}`)),
    ]);
    return {
      status: "rebuilt",
      runId: this.runId,
      version: this.version,
      buildHash: built.buildHash,
      fence: result.fence,
    };
  }

  /**
   * A version already rebuilt is skipped in one round trip, without the claim
   * (`skipIfAlreadyRebuilt`). A failed check is not a failure: the claim path checks again.
   */
  private async skipIfAlreadyRebuilt(): Promise<RebuildOutcome | null> {
    const { deps, data } = this;
    const now = Date.now();
    const by = await skipIfAlreadyRebuilt(
      deps.main,
      deps.keys,
      { id: this.job.id, data },
      this.idemKey,
      { ...this.record, ...this.attemptFields(now), finishedAt: now, durationMs: 0 },
      this.retention,
    ).catch((error: unknown) => {
      this.log(`idempotency check failed (going on to the claim): ${String(error)}`);
      return null;
    });
    if (by === null) return null;
    // Not awaited: a metrics counter must not add a round trip to the cheapest path.
    void countRunFinished(deps.main.multi(), deps.keys, { ...data, status: "skipped", durationMs: 0, finishedAt: now })
      .exec()
      .catch(() => null);
    await Promise.all(this.pendingWrites);
    this.pendingWrites = [];
    return { status: "skipped", reason: "already-rebuilt", runId: this.runId, version: this.version };
  }

  /** Steps → content-addressed build → fenced publish → `current`. Runs under the claim. */
  private async build(
    held: HeldClaim,
  ): Promise<
    { status: "published"; buildHash: string } | { status: "superseded"; buildHash: string; newestFence: number }
  > {
    const { deps, data, definition } = this;
    const signal = AbortSignal.any([this.job.signal, held.signal, AbortSignal.timeout(definition.timeLimit)]);
    const startedAt = Date.now();
    this.startedAt = startedAt;
    this.write("running", {
      ...this.attemptFields(startedAt),
      fence: held.fence,
      progress: 0,
      reason: null,
    });
    if (this.job.attempt > 1) {
      this.pendingWrites.push(
        this.closeAbandonedAttempts().catch((e: unknown) => this.log(`closing earlier attempts failed: ${String(e)}`)),
      );
    }

    const outputDir = outputDirOf(definition, data.tenant);
    const workDir = workDirOf(outputDir, this.runId);
    await freshDirectory(workDir);
    try {
      const stepCount = definition.steps.length;
      for (const [index, step] of definition.steps.entries()) {
        signal.throwIfAborted();
        const record: StepRecord = { name: step.name, status: "running", startedAt: Date.now(), finishedAt: null };
        this.steps.push(record);
        this.write(null, { steps: this.steps, progress: index / stepCount });
        const context: StepContext = {
          signal,
          workDir,
          outputDir,
          baseDir: definition.baseDir,
          version: this.version,
          tenant: data.tenant,
          rebuild: data.rebuild,
          runId: this.runId,
          log: (line) => this.logWriter.append(line),
          progress: (fraction) => {
            const overall = (index + Math.max(0, Math.min(1, fraction))) / stepCount;
            this.job.progress?.(overall);
            this.write(null, { progress: Math.round(overall * 1000) / 1000 });
          },
        };
        try {
          if ("run" in step) await runCommandStep(step, context);
          else await runTilesStep(step, context);
          record.status = "done";
        } catch (error) {
          record.status = signal.aborted ? "aborted" : "failed";
          throw error;
        } finally {
          record.finishedAt = Date.now();
        }
      }
      this.write(null, { steps: this.steps, progress: 1 });
      signal.throwIfAborted();

      const buildHash = await hashDirectory(workDir);
      await promoteBuild(outputDir, workDir, buildHash);
      held.throwIfLost(); // a paused holder notices here, before it asks to publish
      const published = await publishFenced(deps.claims, deps.keys, {
        name: this.claim,
        fence: held.fence,
        value: buildHash,
        runId: this.runId,
      });
      if (published.status === "superseded") {
        this.logWriter.append(`publish refused: fence ${held.fence} < newest ${published.newestFence}`);
        return { status: "superseded", buildHash, newestFence: published.newestFence };
      }
      await pointCurrent(outputDir, buildHash);
      this.logWriter.append(`published build ${buildHash} (fence ${held.fence})`);
      return { status: "published", buildHash };
    } catch (error) {
      await fs.rm(workDir, { recursive: true, force: true }).catch(() => {});
      // Report the claim loss or the job's abort reason rather than the AbortError it caused.
      if (signal.aborted) throw signal.reason ?? error;
      throw error;
    }
  }

  private async onHeld(holder: ClaimHolder, pttlMs: number): Promise<RebuildOutcome> {
    const heldBy = holder.workerId ?? holder.host ?? "another worker";
    if (holder.version === this.version) {
      await Promise.all([
        recordSkip(this.deps.claims, this.deps.keys, this.claim).catch((e: unknown) =>
          this.log(`skip count failed: ${String(e)}`),
        ),
        this.finishSkipped(
          "claim-held",
          `${this.claim} is held by ${heldBy} (job ${holder.jobId ?? "?"}) building the same version`,
        ),
      ]);
      return { status: "skipped", reason: "claim-held", runId: this.runId, version: this.version, heldBy };
    }
    const wait = Math.max(DEFER_MIN_MS, Math.min(DEFER_MAX_MS, pttlMs + 100));
    this.log(`deferred ${Math.round(wait / 1000)} s: ${this.claim} is held by ${heldBy} building ${holder.version}`);
    return { status: "deferred", until: Date.now() + wait, heldBy, version: this.version };
  }

  private async finishSkipped(reason: "already-rebuilt" | "claim-held", detail: string): Promise<RebuildOutcome> {
    await this.finish("skipped", { reason: `${reason}: ${detail}`, ...this.attemptFields(Date.now()) });
    return { status: "skipped", reason, runId: this.runId, version: this.version };
  }

  /** What every record of this attempt says about it once it started (or was skipped). */
  private attemptFields(startedAt: number): Partial<RunRecord> {
    return {
      jobId: this.job.id,
      attempt: this.job.attempt,
      version: this.version,
      trigger: this.data.trigger,
      workerId: this.deps.worker.id,
      host: this.deps.worker.host,
      startedAt,
      idempotencyKey: this.idemKey,
    };
  }

  /**
   * A scheduled tick counts as served as soon as a worker picks its job up — whether the run then
   * rebuilds, skips or waits — so the banner's "missed tick" means that no worker ran it at all.
   * Ticks older than the run retention are dropped on the way (one entry per tick otherwise).
   */
  private recordTick(): void {
    const tick = scheduledTickOf(this.job.id);
    if (!tick) return;
    const key = this.deps.keys.scheduleTicks(this.data.rebuild, this.data.tenant);
    this.pendingWrites.push(
      this.deps.main
        .multi()
        .zadd(key, "NX", tick.tickAt, this.job.id)
        .zremrangebyscore(key, "-inf", tick.tickAt - this.retention.maxAgeMs)
        .exec()
        .catch((e: unknown) => this.log(`recording the scheduled tick failed: ${String(e)}`)),
    );
  }

  /**
   * Earlier attempts of this job still recorded as running died with their worker (or stalled
   * and were redelivered): this attempt holds the claim now, so record them as aborted. A paused
   * attempt that wakes up later writes its own final record over this one.
   */
  private async closeAbandonedAttempts(): Promise<void> {
    const { main, keys } = this.deps;
    const earlier = Array.from({ length: Math.min(50, this.job.attempt - 1) }, (_, i) =>
      runIdOf(this.job.id, this.job.attempt - 1 - i),
    );
    const lookup = main.pipeline();
    for (const id of earlier) lookup.hget(keys.run(id), "status");
    const replies = (await lookup.exec()) ?? [];
    const tx = main.multi();
    let abandoned = 0;
    earlier.forEach((id, i) => {
      if (replies[i]?.[1] !== "running") return;
      abandoned += 1;
      upsertRunInto(
        tx,
        keys,
        {
          id,
          rebuild: this.data.rebuild,
          tenant: this.data.tenant ?? null,
          createdAt: this.job.createdAt,
          status: "aborted",
          reason: `worker died or stalled; the job was redelivered as attempt ${this.job.attempt}`,
          finishedAt: Date.now(),
        },
        this.retention,
      );
    });
    if (abandoned > 0) await tx.exec();
  }

  /** Maps an error thrown under the claim to a final record and a `RebuildError` (or hand-back). */
  private async classifyFailure(error: unknown): Promise<{ status: "handed-back"; runId: string }> {
    const jobReason = this.job.signal.aborted ? String(this.job.signal.reason ?? "") : "";
    if (jobReason === "shutdown") {
      await this.finish("aborted", { reason: "worker shutdown: job handed back to the queue" });
      return { status: "handed-back", runId: this.runId };
    }
    if (error instanceof ClaimLostError) {
      const status: RunStatus = error.cause === "superseded" ? "superseded" : "aborted";
      await this.finish(status, { reason: `claim lost: ${error.message}` }, { deleteIdempotency: true });
      // superseded: another attempt owns the work now; expired/deadline: try again later.
      throw new RebuildError(error.message, error.cause !== "superseded", this.runId, { cause: error });
    }
    if (jobReason === "lock-lost") {
      await this.finish("aborted", { reason: "BullMQ job lock lost (worker stalled); the job is redelivered" });
      throw new RebuildError("job lock lost", true, this.runId, { cause: error });
    }
    if (isTimeout(error)) {
      const reason = `time limit of ${this.definition.timeLimit} ms exceeded`;
      await this.finish("aborted", { reason }, { deleteIdempotency: true });
      throw new RebuildError(reason, false, this.runId, { cause: error });
    }
    const retry = isTransient(error);
    const message = error instanceof Error ? error.message : String(error);
    await this.finish("failed", { reason: `${retry ? "transient: " : ""}${message}` }, { deleteIdempotency: true });
    throw new RebuildError(message, retry, this.runId, { cause: error });
  }

  private failEarly(error: unknown): never {
    throw new RebuildError((error as Error).message, error instanceof TransientStepError, null, { cause: error });
  }

  /**
   * Queues a record update without waiting (`finish` waits for all of them). One update is in
   * flight at a time; updates made meanwhile are merged and sent as one when it lands (or go into
   * the final MULTI), in order: readers see the same states, minus some that a later one replaced.
   */
  private write(status: RunStatus | null, fields: Partial<RunRecord>): void {
    // Step records change in place: keep them as they are now, not as they are when sent.
    const snapshot = fields.steps ? { steps: fields.steps.map((step) => ({ ...step })) } : {};
    this.queuedFields = { ...this.queuedFields, ...fields, ...snapshot, ...(status ? { status } : {}) };
    if (!this.recordWrite && !this.finishing) this.sendQueuedFields();
  }

  private sendQueuedFields(): void {
    const fields = this.queuedFields!;
    this.queuedFields = null;
    this.recordWrite = upsertRun(this.deps.main, this.deps.keys, { ...this.record, ...fields })
      .catch((error: unknown) => this.log(`run record write failed: ${String(error)}`))
      .then(() => {
        this.recordWrite = null;
        if (this.queuedFields && !this.finishing) this.sendQueuedFields();
      });
  }

  /**
   * The final record in one MULTI with the last log lines and the idempotency key, after every
   * earlier write has landed.
   */
  private async finish(
    status: RunStatus,
    fields: Partial<RunRecord>,
    options: { setIdempotency?: boolean; deleteIdempotency?: boolean } = {},
  ): Promise<void> {
    this.finishing = true;
    while (this.recordWrite) await this.recordWrite;
    await Promise.all(this.pendingWrites);
    this.pendingWrites = [];
    await this.logWriter.settled();
    const finishedAt = Date.now();
    const startedAt = fields.startedAt ?? this.startedAt;
    const tx = this.logWriter.drainInto(this.deps.main.multi());
    upsertRunInto(
      tx,
      this.deps.keys,
      {
        ...this.record,
        ...this.queuedFields,
        ...fields,
        status,
        finishedAt,
        ...(this.steps.length ? { steps: this.steps } : {}),
        ...(startedAt !== null ? { durationMs: finishedAt - startedAt } : {}),
      },
      this.retention,
    );
    countRunFinished(tx, this.deps.keys, {
      ...this.record,
      status,
      finishedAt,
      durationMs: startedAt !== null ? finishedAt - startedAt : null,
    });
    this.queuedFields = null;
    if (options.setIdempotency) {
      tx.set(this.deps.keys.idempotency(this.idemKey), this.runId, "PX", this.definition.idempotency.ttl);
    }
    if (options.deleteIdempotency) tx.del(this.deps.keys.idempotency(this.idemKey));
    try {
      await tx.exec();
    } finally {
      this.finishing = false;
      if (this.queuedFields && !this.recordWrite) this.sendQueuedFields();
    }
  }

  private log(line: string): void {
    this.deps.log?.(`[${this.runId}] ${line}`);
  }
}

/**
 * An empty directory at `dir`, whatever was there. A new run id usually finds nothing, so the
 * (recursive) remove is only paid when `mkdir` reports that the directory already existed.
 */
async function freshDirectory(dir: string): Promise<void> {
  const created = await fs.mkdir(dir, { recursive: true }).catch(() => undefined);
  if (created !== undefined) return;
  await fs.rm(dir, { recursive: true, force: true });
  await fs.mkdir(dir, { recursive: true });
}

function isTimeout(error: unknown): boolean {
  return error instanceof DOMException && error.name === "TimeoutError";
}

/**
 * Worth another attempt: declared transient exit codes, transient errno codes, and a Redis that
 * is briefly away (ioredis reports a restart or a stall without an errno code).
 */
function isTransient(error: unknown): boolean {
  if (error instanceof TransientStepError) return true;
  if (error instanceof StepFailedError) return false;
  const code = (error as NodeJS.ErrnoException | undefined)?.code;
  if (typeof code === "string" && TRANSIENT_ERRNO.has(code)) return true;
  const name = error instanceof Error ? error.name : "";
  const message = error instanceof Error ? error.message : "";
  return (
    name === "MaxRetriesPerRequestError" ||
    /^(Command timed out|Connection is closed|Stream isn't writeable|LOADING |READONLY |TRYAGAIN |CLUSTERDOWN |MASTERDOWN )/.test(
      message,
    )
  );
}
