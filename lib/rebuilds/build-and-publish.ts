/**
 * The work done under the claim: steps in `<output>/.work/<run>-f<fence>-<token tail>` (one per
 * grant: two pickups of one attempt never share one) under the job's signal, the
 * claim's signal and the time limit; the work dir becomes `<output>/builds/<content hash>`; a
 * fenced publish in Redis; then `<output>/current` follows. Progress and step states go to the
 * run record through the attempt's `RunRecorder`.
 */
import { redisClock } from "../redis/clock";
import fs from "node:fs/promises";
import { setTimeout as sleep } from "node:timers/promises";
import type { Redis } from "ioredis";
import { ClaimLostError, publishFenced, readListedPublish, type HeldClaim, type PublishResult } from "../claims";
import type { RedisKeys } from "../redis/keys";
import type { RunRecorder } from "../runs/writer";
import { attemptOfRunId, jobPartOf, runIdOf, type StepRecord } from "../runs/types";
import { holdAfterLastRefreshMs, outputDirOf, type RebuildDefinition } from "./definitions";
import { markHolding, otherHolders, ReissuedFenceError, type HoldingMark } from "./holding-marks";
import { CurrentSwapError, hashDirectory, makeDirectory, promoteBuild, syncPath, workDirOf } from "./output";
import { trackWorkDir } from "./work-dirs";
import {
  FenceNotRecordedError,
  markFenceGranted,
  pointCurrentAtRecord,
  parsePublishedRuns,
  publishedRunEntry,
  listPublishedRun,
  readPublishedFence,
  readPublishedJobs,
  RunNotListedError,
  type PublishedRun,
  recordPublishedFence,
} from "./published-fence";
import { isTransient } from "./classify-failure";
import { LOCK_LOST_ABORT_REASON, TransientStepError, WorkerStalledError, type StepContext } from "./steps/context";
import { runCommandStep } from "./steps/run-step";
import { monotonicNowMs, stepWarden } from "./steps/warden";
import { runTilesStep } from "./steps/tiles-step";

export interface BuildContext {
  /** The claims Redis (fences, published pointers). */
  claims: Redis;
  keys: RedisKeys;
  definition: RebuildDefinition;
  tenant: string | undefined;
  version: string;
  runId: string;
  held: HeldClaim;
  /** The job's signal (shutdown, lost job lock). */
  jobSignal: AbortSignal;
  /** When the attempt began (performance.now()): no step starts after a stall since then. */
  attemptBegan?: number;
  recorder: RunRecorder;
  /** The attempt's step records, kept up to date here (the final record carries them). */
  steps: StepRecord[];
  progress?: (fraction: number) => void;
  /** Called just before the fenced publish (an operator's cancel is looked for then; it aborts `jobSignal`). */
  beforePublish?: (publishing: { fence: number; buildHash: string }) => Promise<void>;
  /**
   * Who rebuilt this version meanwhile (its run id), or null: asked alongside the work dir's
   * creation, before any step; a run id ends the attempt there (`already-rebuilt`). Must not reject.
   */
  alreadyRebuiltBy?: () => Promise<string | null>;
  /**
   * The BullMQ job this attempt belongs to. Every publish keeps its run id beside the output
   * (`readPublishedJobs`), and before any step an attempt looks for an earlier run of its job
   * there: a job the queue's Redis brought back after it published (a crash lost its completion,
   * and maybe its idempotency key) publishes nothing again — a build asked for since (another
   * version) would be put back to this older one — unless `publishFinished` says otherwise.
   */
  jobId?: string;
  /**
   * Whether the run `runId` of this job, listed beside the output as having published this
   * version, finished its publish (the listing follows its fence record onto the disk);
   * `unlisted`: it failed after its fence was recorded and synced beside the output, only its
   * listing refused (`RUN_UNLISTED`). Must not reject.
   */
  publishFinished?: (runId: string) => Promise<boolean | "unlisted">;
  /** The job's `askedAgain` mark now (a token: a request joined the job), or null. May reject. */
  jobMark?: () => Promise<string | null>;
  /**
   * A build of this hash was found changed on disk, or unreadable or unsyncable (a lost write),
   * and moved aside to `path` (build-integrity.ts).
   */
  onChangedBuild?: (found: {
    kind: "changed" | "unsynced";
    path: string;
    expected: string;
    actual: string;
  }) => Promise<void>;
}

export type BuildResult =
  /**
   * `currentNote`: what became of `<output>/current` when its swap or sync failed (a full or
   * failing disk): not moved to the build, or moved but not synced; or when a newer fence was
   * recorded whose build is not on this host (`current` left as it was). Published all the same
   * (Redis and the durable fence say so); repair or the newer publisher moves it later.
   */
  | { status: "published"; buildHash: string; currentNote?: string }
  /** Refused: `newestFence` the claim's newest grant, `publishedFence` the pointer's (FENCED_PUBLISH). */
  | { status: "superseded"; buildHash: string; newestFence: number; publishedFence: number }
  | { status: "already-rebuilt"; rebuiltBy: string }
  /** A run of this job published here already (the output's record of the runs that published). */
  | { status: "published-before"; runId: string }
  /**
   * The publish went through in Redis, but this fence is recorded beside the output with another
   * build (the claims Redis lost writes and granted it twice): not published; `current` stays.
   */
  | { status: "fence-reused"; buildHash: string; recordedHash: string };

/**
 * What became of `current` when the swap after a publish failed, from the stage that failed
 * (review helpers 125, 127: read back afterwards, `current` could not tell a swap that failed from a
 * sync that failed, nor this build from a newer one's).
 */
export function currentNoteOf(current: string, buildHash: string, error: unknown): string {
  const why = error instanceof Error ? error.message : String(error);
  if (!(error instanceof CurrentSwapError)) {
    return `${current} was moved to its build, but the check for a newer publish after it failed (${why}): repair checks it`;
  }
  if (error.hash !== buildHash) {
    return `${current} was moved to its build; following a newer publish's build ${error.hash} then failed (${why}): repair moves it`;
  }
  return error.stage === "swap"
    ? `${current} could not be moved to its build when it ended (${why}): the output served the build before until repair moves it (claimwatch status names an output still lagging)`
    : `${current} was moved to its build, but the move could not be synced to disk (${why}): a crash of this host could bring the build before back until repair moves it again`;
}

export async function buildAndPublish(context: BuildContext): Promise<BuildResult> {
  const { definition, held, recorder, steps } = context;
  const claimSignal = AbortSignal.any([context.jobSignal, held.signal]);
  // With the time limit once the steps may start (waitOutOtherHolders may wait before them).
  let signal = claimSignal;
  const outputDir = outputDirOf(definition, context.tenant);
  // One work dir per grant, not per run id: the same attempt picked up twice (the queue's Redis
  // lost a pickup) runs twice under one run id, and the second takes the claim over while the
  // first's steps may still write until they are stopped; a shared dir would be wiped under the
  // first, and the second's build could hold the first's late writes.
  const workDir = workDirOf(outputDir, `${context.runId}-f${held.fence}-${held.token.slice(-6)}`);
  recorder.update({ fence: held.fence });
  const untrack = trackWorkDir(workDir);
  // The job's mark (a request that joined it: trigger.ts), read once: its publish keeps it.
  const jobMark = context.jobId && context.jobMark ? context.jobMark() : Promise.resolve(null);
  const [rebuiltBy, publishedBefore, created] = await Promise.allSettled([
    context.alreadyRebuiltBy?.() ?? null,
    context.jobId ? earlierPublishOf(context, outputDir, jobMark) : null,
    freshDirectory(workDir),
  ]);
  const markSeen = await jobMark.catch(() => null);
  // An earlier pickup published, but its run could not be listed on disk: this attempt fails as
  // transient and builds nothing (review helper-165: building would publish this version again,
  // over a newer one published since); the next attempt lists the run.
  if (publishedBefore.status === "rejected" && publishedBefore.reason instanceof RunNotListedError) {
    await fs.rm(workDir, { recursive: true, force: true }).catch(() => {});
    untrack();
    throw publishedBefore.reason;
  }
  if (publishedBefore.status === "fulfilled" && publishedBefore.value) {
    await fs.rm(workDir, { recursive: true, force: true }).catch(() => {});
    untrack();
    return { status: "published-before", runId: publishedBefore.value };
  }
  // A version rebuilt meanwhile is skipped whatever became of the work dir (a failing disk).
  if (rebuiltBy.status === "fulfilled" && rebuiltBy.value) {
    await fs.rm(workDir, { recursive: true, force: true }).catch(() => {});
    untrack();
    return { status: "already-rebuilt", rebuiltBy: rebuiltBy.value };
  }
  if (created.status === "rejected") {
    untrack();
    throw created.reason;
  }
  // Longest this holder may run on once it stops knowing it holds the claim (holding-marks.ts).
  const holdMs = holdAfterLastRefreshMs(definition);
  let mark: HoldingMark | undefined;
  let stopTouching = () => {};
  try {
    // Marked before any step, then checked: a claims Redis that forgot this grant before the mark
    // was written (a pause between the two) stops this holder here; one that forgets it later
    // finds the mark (the next grant is above it and waits it out).
    mark = await markHolding(outputDir, held.fence, held.token, holdMs);
    const touch = mark.touch;
    // Rewritten after each refresh, before the refresh extends the claim's local deadline.
    stopTouching = held.whenRefreshed(touch);
    await held.confirm(claimSignal);
    await waitOutOtherHolders(context, { outputDir, holdMs, touch }, claimSignal);
    signal = AbortSignal.any([claimSignal, AbortSignal.timeout(definition.timeLimit)]);
    const stepCount = definition.steps.length;
    for (const [index, step] of definition.steps.entries()) {
      signal.throwIfAborted();
      // A holder that was paused may learn here that its claim is gone, before its timers run.
      held.throwIfLost();
      // Step times on the Redis clock (as its run's are): a worker's own clock may be off.
      const record: StepRecord = { name: step.name, status: "running", startedAt: redisClock.now(), finishedAt: null };
      steps.push(record);
      recorder.update({ steps, progress: index / stepCount });
      const stepContext: StepContext = {
        signal,
        workDir,
        outputDir,
        baseDir: definition.baseDir,
        version: context.version,
        tenant: context.tenant,
        rebuild: definition.name,
        runId: context.runId,
        fence: held.fence,
        ...(context.attemptBegan === undefined ? {} : { attemptBegan: context.attemptBegan }),
        log: (line) => recorder.log(line),
        progress: (fraction) => {
          const overall = (index + Math.max(0, Math.min(1, fraction))) / stepCount;
          context.progress?.(overall);
          recorder.update({ progress: Math.round(overall * 1000) / 1000 });
        },
      };
      try {
        if ("run" in step) await runCommandStep(step, stepContext);
        else {
          const began = performance.now();
          await runTilesStep(step, stepContext);
          // The tiles step runs in this process: a stall during it is its own doing and would
          // repeat on every pickup, so it fails (retried as transient, then for good with this
          // reason) rather than being handed back like a stall from outside.
          const stall = stepWarden.stalledSince(began);
          if (stall !== null) {
            throw new TransientStepError(
              `step ${step.name} blocked this worker for ${Math.round(stall)} ms (the tiles step runs in the worker's process): its job lock and the other jobs' steps on this worker were at risk; use a smaller input or a run step`,
            );
          }
        }
        record.status = "done";
      } catch (error) {
        record.status = signal.aborted ? "aborted" : "failed";
        // Killed by the warden while this worker stood still: it ended then, not when the worker
        // ran again to see it.
        if (error instanceof WorkerStalledError && error.killedAt !== undefined)
          record.finishedAt = redisClock.now() - Math.max(0, monotonicNowMs() - error.killedAt);
        throw error;
      } finally {
        record.finishedAt = Math.max(record.startedAt, record.finishedAt ?? redisClock.now());
      }
    }
    recorder.update({ steps, progress: 1 });
    signal.throwIfAborted();

    const buildHash = await hashDirectory(workDir);
    held.throwIfLost(); // before promoteBuild, which may move a changed published build aside
    // The fence is marked before the publish it is for, durably by the promote's sync: a publish
    // whose record the disk then refuses lives in Redis only, and its fence is not granted again.
    await markFenceGranted(outputDir, held.fence);
    const promoted = await promoteBuild(outputDir, workDir, buildHash);
    if (promoted.changedMovedTo) {
      recorder.log(
        `PUBLISHED BUILD CHANGED: ${promoted.path} no longer hashed to its name; moved aside to ${promoted.changedMovedTo} and replaced by this run's bytes`,
      );
      await context.onChangedBuild?.({
        kind: "changed",
        path: promoted.changedMovedTo,
        expected: buildHash,
        actual: "(moved aside)",
      });
    }
    if (promoted.unsyncedMovedTo) {
      recorder.log(
        `WARNING: the build ${buildHash} found in builds/ could not be read or synced to disk (a failing disk?); moved aside to ${promoted.unsyncedMovedTo} and replaced by this run's synced bytes`,
      );
      await context.onChangedBuild?.({
        kind: "unsynced",
        path: promoted.unsyncedMovedTo,
        expected: buildHash,
        actual: "(lost write: moved aside)",
      });
    }
    held.throwIfLost(); // a paused holder notices here, before it asks to publish
    // After the promote, which can take long (sealing a big tree): a holder paused during it
    // past an operator's cancel must find the cancel when it wakes.
    await context.beforePublish?.({ fence: held.fence, buildHash });
    signal.throwIfAborted();
    const published = await publishRetried(context, buildHash, markSeen);
    if (published.status === "superseded") {
      recorder.log(`publish refused: fence ${held.fence}: ${publishRefusal(held.fence, published)}`);
      return {
        status: "superseded",
        buildHash,
        newestFence: published.newestFence,
        publishedFence: published.publishedFence,
      };
    }
    // Durable before `current` follows: a claims Redis that forgets this publish cannot lead to
    // this fence being granted again or `current` being moved back (published-fence.ts).
    const recorded = await recordPublishedFence(
      outputDir,
      held.fence,
      buildHash,
      context.jobId ? { runId: context.runId, version: context.version, mark: markSeen } : undefined,
    ).catch((error: unknown) => {
      if (error instanceof RunNotListedError) {
        // The fence is on disk (repair may move `current` to it); the run is not listed: not done.
        recorder.log(`WARNING: published build ${buildHash} (fence ${held.fence}), but ${error.message}`);
        throw new FenceNotRecordedError(
          `published build ${buildHash} (fence ${held.fence}) and ${RUN_UNLISTED}, but ${error.message}: not done, so this attempt left current where it was (repair moves it; the job's next attempt lists this run and builds nothing while the fence is on disk)`,
          buildHash,
          { cause: error },
        );
      }
      // A full or failing disk. `current` must not name a build whose fence is not on disk: a
      // claims Redis that then lost this publish would read an older pointer, and repair would
      // move `current` back to it (the record would not say otherwise). Nor is the request done:
      // the publish is in Redis only. Another attempt publishes again (repair may record this
      // fence and move `current` meanwhile, once the disk takes it).
      recorder.log(
        `WARNING: published build ${buildHash} (fence ${held.fence}), but the fence could not be recorded beside the output: ${String(error)}`,
      );
      throw new FenceNotRecordedError(
        `published build ${buildHash} (fence ${held.fence}) in the claims Redis, but its fence could not be recorded on disk (${error instanceof Error ? error.message : String(error)}): not durable, so this attempt left current where it was (repair moves it once the disk records the fence)`,
        buildHash,
        { cause: error },
      );
    });
    // A holder paused between its publish and this point (then force-released, or past its TTL)
    // must not move `current` back over a newer fence's build.
    if (recorded.status === "newer") {
      if (recorded.unlisted)
        recorder.log(`WARNING: this publish is not listed beside the output: ${recorded.unlisted}`);
      recorder.log(`published build ${buildHash} (fence ${held.fence}); a newer fence published since: current stays`);
      return { status: "published", buildHash };
    }
    if (recorded.status === "fence-reused") {
      const recordedHash = recorded.known.hash;
      recorder.log(
        `fence ${held.fence} was granted twice (the claims Redis lost writes): build ${recordedHash} was recorded with it first; build ${buildHash} is not published, current stays`,
      );
      return { status: "fence-reused", buildHash, recordedHash };
    }
    // Published (Redis and the durable fence say so): a `current` that cannot be swapped or synced
    // now lags behind until repair moves it forward (repair.ts); the attempt is not failed for it.
    const swap = await pointCurrentAtRecord(outputDir, held.fence, buildHash).then(
      (outcome) => ({ outcome, error: null }),
      (error: unknown) => ({ outcome: null, error }),
    );
    if (swap.outcome?.kind === "newer-not-here") {
      // A newer fence's record without its build here: `current` is that publisher's (or
      // repair's) to move; the record says this run's build may not be what the output serves.
      const { newest } = swap.outcome;
      const names = swap.outcome.swapped ? "this run's build or one published after it" : "the build it named before";
      const note = `a newer fence ${newest.fence} is recorded beside the output, whose build ${newest.hash || "(unreadable)"} is not on this host: ${outputDir}/current names ${names} until its publisher or repair moves it`;
      recorder.log(`published build ${buildHash} (fence ${held.fence}); ${note}`);
      return { status: "published", buildHash, currentNote: note };
    }
    recorder.log(
      swap.error === null
        ? `published build ${buildHash} (fence ${held.fence})`
        : `WARNING: published build ${buildHash} (fence ${held.fence}), but ${outputDir}/current could not be swapped or synced: ${String(swap.error)}; repair moves it to the published build`,
    );
    if (swap.error === null) return { status: "published", buildHash };
    return {
      status: "published",
      buildHash,
      currentNote: currentNoteOf(`${outputDir}/current`, buildHash, swap.error),
    };
  } catch (error) {
    await fs.rm(workDir, { recursive: true, force: true }).catch(() => {});
    // Report the claim loss or the job's abort reason rather than the AbortError it caused; but a
    // stall the step warden ended names its cause (the lost job lock is its consequence).
    const stallLostTheLock = error instanceof WorkerStalledError && signal.reason === LOCK_LOST_ABORT_REASON;
    // A claim lost while the worker stood still (SIGSTOP past the TTL, or force-released then):
    // the loss is what the attempt acts on, and the warden's kill of its step is told with it
    // (helper-101, helper-110).
    // So is a publish that went through in the claims Redis before the loss was noticed, whose
    // fence record the disk then refused (a holder paused at its publish, then a full disk: the
    // soak): the record says it published there, and names the build.
    const lost: unknown = signal.reason;
    if (
      (error instanceof WorkerStalledError || error instanceof FenceNotRecordedError) &&
      lost instanceof ClaimLostError
    ) {
      const detail = [lost.detail, error.message].filter(Boolean).join("; ");
      const published = error instanceof FenceNotRecordedError ? error.buildHash : lost.publishedBuildHash;
      throw new ClaimLostError(lost.claimName, lost.cause, lost.fence, detail, published);
    }
    if (signal.aborted && !stallLostTheLock) throw signal.reason ?? error;
    throw error;
  } finally {
    // The steps have stopped (they are awaited): this holder runs nothing more under the claim.
    stopTouching();
    await mark?.remove();
    untrack();
  }
}

/**
 * Why FENCED_PUBLISH refused `fence`: a newer grant; this very grant no longer holding the claim
 * (force-released or expired: nothing newer granted, nothing newer published); or a grant the
 * claims Redis does not know as it stands (it lost writes: its counter below the fence, or the
 * pointer at or past it) — review helper-183.
 */
export function publishRefusal(fence: number, refused: { newestFence: number; publishedFence: number }): string {
  if (refused.newestFence > fence) return `a newer holder (fence ${refused.newestFence})`;
  if (refused.newestFence === fence && refused.publishedFence < fence)
    return "the claim was no longer this attempt's (force-released or expired), and nobody has taken it since";
  return `the claims Redis does not know this grant as it stands (newest fence ${refused.newestFence}, published fence ${refused.publishedFence}: it lost writes)`;
}

/** What the reason of an attempt whose fence is on disk and whose run alone is not listed says. */
export const RUN_UNLISTED = "recorded its fence beside the output";

/**
 * Runs of job `jobId` listed as having published `version` here, oldest first: the output's list
 * (on disk: it survives any Redis) and the claims Redis's (pushed by the publish itself: it knows
 * a publish whose fence is not on the disk yet, its holder paused). A list that cannot be read
 * counts as empty; `strict`: it throws (a caller that must not trust what it could not read).
 */
export async function listedPublishesOf(
  place: { claims: Pick<Redis, "lrange">; keys: RedisKeys; claimName: string; outputDir: string },
  jobId: string,
  version: string,
  options: { strict?: boolean } = {},
): Promise<PublishedRun[]> {
  const ofThisJob = jobPartOf(runIdOf(jobId, 1));
  const fromRedis = place.claims
    .lrange(place.keys.publishedRuns(place.claimName), 0, -1)
    .then((lines) => parsePublishedRuns(lines).reverse());
  const [onDisk, inRedis] = await Promise.all([
    readPublishedJobs(place.outputDir, { ...options, ofJob: ofThisJob }),
    options.strict ? fromRedis : fromRedis.catch((): PublishedRun[] => []),
  ]);
  return [...onDisk, ...inRedis].filter((run) => run.version === version && jobPartOf(run.runId) === ofThisJob);
}

/**
 * Waits while another holder's mark says it may still be running steps for this output although
 * the claims Redis granted the claim to this one: a grant it forgot in a crash, or a claim lost
 * while its holder was stopped (past its TTL). The earlier attempt this grant took the claim over
 * from is not waited for (the takeover's own rules cover it).
 */
async function waitOutOtherHolders(
  context: BuildContext,
  own: { outputDir: string; holdMs: number; touch: () => Promise<void> },
  signal: AbortSignal,
): Promise<void> {
  const { held, recorder } = context;
  const { outputDir, holdMs } = own;
  const known = held.tookOverFrom ? [held.tookOverFrom.token] : [];
  let waited = 0;
  for (let round = 0; ; round++) {
    // Against this holder's mark rewritten now: its mtime is the filesystem's "now".
    if (round > 0)
      await own.touch().catch((error: unknown) => {
        throw new TransientStepError(`this holder's mark could not be rewritten: ${String(error)}`, { cause: error });
      });
    const others = await otherHolders(outputDir, { fence: held.fence, token: held.token, holdMs }, known);
    // The claims Redis forgot that fence and granted it again (the floor was read before a mark):
    // given up, so that no step sees one fence twice; the next grant is above the mark.
    if (others.highestFence >= held.fence) throw new ReissuedFenceError(held.fence, others.highestFence);
    if (others.waitMs <= 0) return;
    // A real holder the claims Redis forgot stops rewriting its mark: one that keeps looking fresh
    // this long is not one (a mark that cannot be read, a clock gone wrong). Logged, not waited for.
    if (waited >= MAX_WAIT_HOLDS * holdMs) {
      recorder.log(
        `fence ${others.fences.join(", ")} still marked beside the output after ${Math.round(waited / 1000)} s of waiting: not waited for any longer`,
      );
      return;
    }
    recorder.log(
      `fence ${others.fences.join(", ")} is marked beside the output by a holder the claims Redis no longer knows (a grant it forgot in a crash, or a claim lost while its holder was stopped): it may still be running; waiting ${Math.ceil(others.waitMs / 1000)} s before the first step`,
    );
    await sleep(others.waitMs, undefined, { signal });
    waited += others.waitMs;
    held.throwIfLost();
  }
}

/** The longest wait for other holders, in holds (this holder's TTL plus stop grace). */
const MAX_WAIT_HOLDS = 3;

/**
 * The fenced publish, sent again while Redis is briefly away. A publish whose reply was lost may
 * have moved the pointer: its repeat answers "this fence already published this value"
 * (FENCED_PUBLISH's retried-call branch, checked before the holder), so the attempt is recorded
 * as published, never as failed with the pointer moved. When Redis stays away the outcome is
 * unknown: a transient error, so another attempt (a new fence) settles it.
 */
async function publishRetried(context: BuildContext, buildHash: string, mark: string | null): Promise<PublishResult> {
  const { held } = context;
  const request = {
    name: held.name,
    fence: held.fence,
    token: held.token,
    value: buildHash,
    runId: context.runId,
    ...(context.jobId ? { listed: publishedRunEntry({ runId: context.runId, version: context.version, mark }) } : {}),
  };
  for (let attempt = 1; ; attempt++) {
    try {
      return await publishFenced(context.claims, context.keys, request);
    } catch (error) {
      if (!isTransient(error)) throw error;
      if (attempt >= PUBLISH_ATTEMPTS) {
        throw new TransientStepError(
          `publish of ${buildHash} (fence ${held.fence}): outcome unknown, Redis did not answer: ${String(error)}`,
        );
      }
      context.recorder.log(`publish: no reply (${String(error)}); asking again`);
      await new Promise((resolve) => setTimeout(resolve, 250 * attempt));
    }
  }
}

const PUBLISH_ATTEMPTS = 6;

/**
 * An empty directory at `dir`, whatever was there. A new run id usually finds nothing, so the
 * (recursive) remove is only paid when `mkdir` reports that the directory already existed.
 */
async function freshDirectory(dir: string): Promise<void> {
  // Its real error, not ENOENT for a `.work` a full disk refused (makeDirectory).
  const created = await makeDirectory(dir).catch((error: NodeJS.ErrnoException) => {
    if (error.code === "EEXIST") return false; // a file in its place
    throw error;
  });
  if (created) return;
  await fs.rm(dir, { recursive: true, force: true });
  await fs.mkdir(dir);
}

/**
 * The run of this attempt's job that published this same version to `outputDir` and finished its
 * publish, or null: the newest such run the output lists (`readPublishedJobs`). Another version
 * (a job without one that read changed inputs) is new work, not a repeat.
 */
async function earlierPublishOf(
  context: BuildContext,
  outputDir: string,
  mark: Promise<string | null>,
): Promise<string | null> {
  const [listed, markNow] = await Promise.all([
    listedPublishesOf(
      { claims: context.claims, keys: context.keys, claimName: context.held.name, outputDir },
      context.jobId!,
      context.version,
    ),
    mark,
  ]);
  // The attempts that saw the job's mark as it is now (one that saw it answered every request
  // that joined before it; a request joined since a publish that did not see it: the job
  // publishes for that request), newest first, by attempt, not by list order: the lists (the
  // disk's, a legacy file's, the claims Redis's, which may come back older) need not agree on
  // order (review helper-169). The first whose publish finished is the one skipped by (a newer one
  // may have failed after its publish: review helper-171).
  const candidates = listed
    .filter((run) => markNow === null || run.mark === markNow)
    .sort((a, b) => attemptOfRunId(b.runId) - attemptOfRunId(a.runId))
    .filter((run, i, all) => all.findIndex((other) => other.runId === run.runId) === i);
  for (const earlier of candidates) {
    if (await publishCounts(context, outputDir, earlier)) return earlier.runId;
  }
  return null;
}

/**
 * Whether `earlier`'s publish finished and counts for this job: then it is listed on disk (and
 * synced) before this attempt ends on it. Once it counts, what cannot be read or written fails
 * the attempt as transient and builds nothing (RunNotListedError): building would publish this
 * version again, over one published since (review helper-165, helper-166).
 */
async function publishCounts(context: BuildContext, outputDir: string, earlier: PublishedRun): Promise<boolean> {
  const finished = await (context.publishFinished?.(earlier.runId) ?? Promise.resolve(false));
  const notListed = (what: string) => (error: unknown) => {
    throw new RunNotListedError(`run ${earlier.runId} published here, but ${what}: ${String(error)}`, {
      cause: error,
    });
  };
  const publish = await readListedPublish(context.claims, context.keys, context.held.name, earlier.runId, {
    version: earlier.version,
    mark: earlier.mark,
  }).catch(finished ? notListed("the claims Redis's list could not be read") : () => null);
  if (finished === false) return false;
  // Its record says it failed after its fence was recorded and synced, only the listing refused
  // (review helper-166): durable while the disk holds that fence with its build, or a newer one.
  if (finished === "unlisted") {
    const known = publish ? await readPublishedFence(outputDir).catch(() => null) : null;
    const durable =
      publish &&
      known &&
      (known.fence > publish.fence || (known.fence === publish.fence && known.hash === publish.value));
    if (!durable) return false;
  }
  // Listed on disk (and synced: a listing its publisher made may not be, killed before its sync)
  // before this job ends on it: listed in the claims Redis only (its publisher's listing on disk
  // failed, or it was lost), a crash of both Redises would bring the job back with nothing to find
  // (review helper-164). (An entry of an earlier version, without its fence: nothing to list it
  // with; skipped as before.) Listed on disk only (the claims Redis's list lost it): its link
  // synced again (review helper-171).
  if (publish) await listPublishedRun(outputDir, { fence: publish.fence, hash: publish.value }, earlier);
  else await syncPath(outputDir).catch(notListed(`${outputDir} cannot be synced`));
  return true;
}
