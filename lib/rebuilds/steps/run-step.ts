/**
 * `run` steps: an argv array, executed without a shell (a user who wants one writes `sh -c`).
 * Output goes to the run log line by line. The program runs under the worker's containment
 * (containment.ts): the step ends when the program ends, and nothing it started outlives the step.
 * On abort: SIGTERM to the program, SIGKILL to everything (`cgroup.kill` in `cgroup` mode) after
 * `killGrace`. Exit codes listed
 * in `transientExitCodes` are transient.
 */
import { spawn, type ChildProcess } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import type { RunStep } from "../definitions";
import { CGROUP_JOIN_FAILED_LINE, detectContainment, programPath, StepCgroups, type Containment } from "./containment";
import {
  expandPlaceholders,
  StepFailedError,
  TransientStepError,
  WorkerStalledError,
  type StepContext,
} from "./context";
import { buildsNamespace, BuildsNamespaceError, nsenterFailed, type NamespaceEntry } from "./builds-namespace";
import { StepCgroup } from "./step-cgroup";
import { STEP_OF_VARIABLE, stepWarden } from "./warden";

/** Longest log line kept; longer lines are cut (binary output must not flood the log). */
const MAX_LINE = 2_000;
/** A starter's exit codes (the init's, nsenter's) for a program it could not start: not executable, not found. */
const NOT_STARTED = [126, 127];
/** What that starter (dash as `init`, `env`, or nsenter into the builds namespace) says then, on stderr. */
const SHELL_NOT_STARTED =
  /^(?:init: \d+: .*: (?:not found|No such file or directory|Permission denied|Is a directory|cannot execute.*)|env: .*: (?:No such file or directory|Permission denied)|nsenter: failed to execute .*: (?:No such file or directory|Permission denied|Is a directory|Exec format error))$/;
/** The shell the init runs in (found on the worker's PATH, not the step's). */
const SH = programPath("sh");
/**
 * After the program ended, how long its output pipes may stay open (process-group mode: a
 * daemon that escaped the group may hold them). A PID namespace closes them when it ends.
 */
const DRAIN_MS = 1_000;
/** How long a step's start waits for the step warden's first answer (a warden just started, or replaced). */
const WARDEN_ANSWER_WAIT_MS = 5_000;

/**
 * A running step: its spawned process (`unshare`, the init itself, or in `cgroup` mode the
 * program) and how to signal it.
 */
interface LiveStep {
  child: ChildProcess;
  containment: Containment;
  /** `cgroup` mode: the step's cgroup. */
  cgroup: StepCgroup | null;
}

/** Steps running in this process, so a worker that must exit now can kill them all. */
const liveSteps = new Set<LiveStep>();

/** SIGKILLs every step this process runs (the worker's last resort before it exits). */
export function killAllSteps(): number {
  for (const step of liveSteps) killStep(step);
  return liveSteps.size;
}

/**
 * The step's init: the spawned process itself in process-group mode; in a PID namespace the
 * only child of `unshare` (null until `unshare` has forked it).
 */
function initPid(step: LiveStep): number | null {
  const pid = step.child.pid!;
  if (step.containment.mode !== "pid-namespace") return pid;
  return firstChild(pid);
}

function firstChild(pid: number): number | null {
  try {
    const children = fs.readFileSync(`/proc/${pid}/task/${pid}/children`, "utf8").trim().split(/\s+/);
    return children[0] ? Number(children[0]) : null;
  } catch {
    return null;
  }
}

/**
 * SIGTERM to the program alone: in a namespace the init's only child (its init, pid 1, would not
 * get it); in process-group mode the init, which passes it on; in `cgroup` mode the program
 * itself (the spawned process; shielded, nsenter until it execs the program: a SIGTERM then ends
 * the step before its program starts). Retried until the init's child exists.
 */
function terminateStep(step: LiveStep, until: () => boolean): void {
  const init = initPid(step);
  const target = init === null || step.containment.mode !== "pid-namespace" ? init : firstChild(init);
  if (target === null) {
    if (!until()) setTimeout(() => terminateStep(step, until), 20);
    return;
  }
  try {
    process.kill(target, "SIGTERM");
  } catch {
    // ended meanwhile
  }
}

/**
 * SIGKILL: `cgroup.kill` of the step's cgroup; in a namespace to its init (the kernel ends
 * everything in it, and `unshare` exits only after that) and to the whole process group; else to
 * the whole process group.
 */
function killStep(step: LiveStep): void {
  if (step.cgroup) return step.cgroup.kill();
  const pid = step.child.pid!;
  const init = step.containment.mode === "pid-namespace" ? initPid(step) : null;
  try {
    if (init !== null) process.kill(init, "SIGKILL");
  } catch {
    // ended meanwhile
  }
  try {
    // Also the group (the spawn is detached): with no init yet, `unshare` and a child it may be
    // forking this instant share it (a child read a moment ago may be gone, and the
    // init not yet read); --kill-child ends a namespace made meanwhile.
    process.kill(-pid, "SIGKILL");
  } catch {
    // ended meanwhile
  }
}

export async function runCommandStep(
  step: RunStep,
  context: StepContext,
  containment: Containment = detectContainment(),
): Promise<void> {
  context.signal.throwIfAborted();
  // A limit must hold from the program's first instruction: see Containment.forLimitedSteps.
  if (containment.forLimitedSteps && (step.limits.memory !== undefined || step.limits.pids !== undefined)) {
    containment = containment.forLimitedSteps;
  }
  const [program, ...args] = step.run.map((arg) => expandPlaceholders(arg, context));
  const cwd = step.cwd ? path.resolve(context.baseDir, expandPlaceholders(step.cwd, context)) : context.workDir;
  const env = {
    ...process.env,
    ...Object.fromEntries(Object.entries(step.env ?? {}).map(([k, v]) => [k, expandPlaceholders(v, context)])),
    CLAIMWATCH_WORK: context.workDir,
    CLAIMWATCH_VERSION: context.version,
    CLAIMWATCH_REBUILD: context.rebuild,
    CLAIMWATCH_TENANT: context.tenant ?? "",
    CLAIMWATCH_RUN_ID: context.runId,
    CLAIMWATCH_FENCE: String(context.fence),
    [STEP_OF_VARIABLE]: String(process.pid),
  };

  // A root step sees its output's published builds read-only (containment.ts, `BuildsShield`):
  // it starts with `nsenter` into the worker's namespace for that (builds-namespace.ts).
  const shielded = containment.builds.shielded ? path.join(context.outputDir, "builds") : "";
  let entry: NamespaceEntry | null = null;
  if (shielded) {
    // The worker's holding mark made (and synced) it before the first step; for other callers it
    // is made here.
    makeBuildsDir(step.name, shielded);
    try {
      // Checked in the turn of the spawn: nothing can retire that holder in between.
      for (let tries = 1; !entry || !buildsNamespace.isCurrent(entry); tries++) {
        entry?.release();
        entry = null;
        if (tries > 3) throw new Error("its namespace for read-only builds kept ending as it was entered");
        entry = await buildsNamespace.enter(shielded, cwd, context.signal);
      }
    } catch (error) {
      // Aborted meanwhile (a lost claim, a time limit, a stop): that is the step's end, not the namespace.
      entry?.release();
      context.signal.throwIfAborted();
      const message = `step ${step.name}: not started: ${(error as Error).message}`;
      if (error instanceof BuildsNamespaceError && error.mountRefused) throw new StepFailedError(message);
      throw new TransientStepError(message);
    }
    // Nothing asynchronous from here to the spawn.
    if (context.signal.aborted) entry.release();
    context.signal.throwIfAborted();
  }
  const shield = entry?.prefix ?? [];
  try {
    let cgroups: StepCgroups | null = null;
    if (step.limits.memory !== undefined || step.limits.pids !== undefined) {
      try {
        cgroups = StepCgroups.create(containment, cgroupName(context.runId, step.name), step.limits);
      } catch (error) {
        // A kernel refusal (EAGAIN, ENOSPC from cgroup.max.descendants, EBUSY, ENOMEM) may clear;
        // a limit this host cannot enforce at all will not.
        const code = (error as NodeJS.ErrnoException).code;
        if (code)
          throw new TransientStepError(
            `step ${step.name}: cannot make its limit cgroup (${code}): ${(error as Error).message}`,
          );
        throw new StepFailedError(`step ${step.name}: ${(error as Error).message}`);
      }
    }
    // Nothing starts under a claim this worker may have lost while it stalled, nor unwatched. A
    // stall from here to the spawn is caught right after it (`stalledAtSpawn`).
    const checkedAt = performance.now();
    if (context.attemptBegan !== undefined) {
      try {
        stepWarden.throwIfStalled(context.attemptBegan, `step ${step.name} not started`);
      } catch (error) {
        void cgroups?.remove();
        throw error;
      }
    }
    if (!(await stepWarden.answering(WARDEN_ANSWER_WAIT_MS))) {
      void cgroups?.remove();
      throw new TransientStepError(
        `step ${step.name}: not started, the step warden is not running or not answering (see the worker's log)`,
      );
    }
    if (context.signal.aborted) {
      // Aborted while the start waited for the warden (a lost claim, a cancel): nothing starts.
      void cgroups?.remove();
      context.signal.throwIfAborted();
    }
    const options = {
      cwd,
      env,
      stdio: ["ignore", "pipe", "pipe"] as ["ignore", "pipe", "pipe"],
      detached: true, // a process group of its own
    };
    const argv = containment.stepCgroups
      ? shield
      : [...shield, ...containment.prefix, SH, "-c", containment.init, "init", cgroups?.joinArgument ?? ""];
    let child: ChildProcess;
    let stepCgroup: StepCgroup | null = null;
    // The warden ends the step if this worker dies or stops running (warden.ts).
    let wardenId: string | null = null;
    if (containment.stepCgroups) {
      // `cgroup` mode: the program itself (shielded: `nsenter` first, which execs it), born
      // in the step's cgroup (step-cgroup.ts).
      try {
        stepCgroup = StepCgroup.create(containment.stepCgroups);
      } catch (error) {
        throw new TransientStepError(`step ${step.name}: cannot make its cgroup: ${(error as Error).message}`);
      }
      wardenId = stepWarden.watchCgroup(stepCgroup.dir); // before this worker enters it
      stepTestHooks.beforeSpawn?.();
      try {
        child = stepCgroup.spawnInside(() =>
          argv.length > 0
            ? spawn(argv[0]!, [...argv.slice(1), program!, ...args], options)
            : spawn(program!, args, options),
        );
      } catch (error) {
        // Entering the cgroup failed, or spawn threw (bad arguments): nothing runs.
        stepWarden.forget(wardenId);
        void stepCgroup.remove();
        throw spawnThrew(step.name, error);
      }
      // The warden found this worker inside a step's cgroup (stopped mid-spawn): the child may have
      // been born in `worker-held`. It dies now; the warden killed the step's cgroup already.
      if (stepCgroup.heldByWarden()) stepCgroup.killHeld();
    } else {
      stepTestHooks.beforeSpawn?.();
      try {
        child = spawn(argv[0]!, [...argv.slice(1), program!, ...args], options);
      } catch (error) {
        void cgroups?.remove();
        throw spawnThrew(step.name, error);
      }
      if (child.pid !== undefined) wardenId = stepWarden.watch(child.pid, containment.mode === "process-group");
    }
    // No pipes to read it by (EMFILE, ENFILE: Node gave up before the fork; no pid either). A
    // failed spawn with its pipes (ENOENT, EACCES: no pid) takes the path below, via `error`.
    if (!child.stdout || !child.stderr) {
      const failed = child;
      const error = await new Promise<Error | null>((resolve) => {
        failed.once("error", resolve); // emitted on the next tick
        setImmediate(() => resolve(null));
      });
      if (failed.pid !== undefined) killStep({ child: failed, containment, cgroup: stepCgroup });
      if (stepCgroup && !(await stepCgroup.remove()))
        context.log(`[${step.name}] could not remove its cgroup ${stepCgroup.dir}: processes still in it`);
      if (wardenId !== null) stepWarden.forget(wardenId);
      await cgroups?.remove();
      const code = (error as NodeJS.ErrnoException | null)?.code ?? "no process or no output pipes";
      throw new TransientStepError(`step ${step.name}: not started (${code}): ${error?.message ?? "spawn failed"}`);
    }
    // This worker stopped running between the check above and the spawn: the warden may have
    // killed the (empty) cgroup and forgotten it, or the claim may be lost. The step dies now and
    // the job goes back (below), whether or not the warden acted.
    const stall = stepWarden.stalledSince(checkedAt);
    const wardenActed = wardenId !== null ? stepWarden.reportedKill(wardenId) : null;
    const stalledAtSpawn =
      wardenActed?.reason ??
      (stall !== null
        ? `this worker did not run for ${Math.round(stall)} ms as it started the step: the step warden may have ended the step's watch, and the job lock may have run out`
        : null);
    const spawnedAt = performance.now();
    const live: LiveStep = { child, containment, cgroup: stepCgroup };
    liveSteps.add(live);
    if (stalledAtSpawn !== null) killStep(live);
    let joinFailed = false;
    // nsenter could not enter the builds namespace (its holder ended meanwhile): its exit code 1
    // is then its own, not the program's.
    let enterFailed = false;
    // The starter of the program (init, nsenter) said it could not: 126 or 127 is then its own
    // exit code, not the program's.
    let shellNotStarted = false;
    let stderrLines = 0;
    // Output is stamped when this worker reads it. Read after this worker stood still (SIGSTOP, a
    // frozen container), it may have been written during the stand-still, even by a step the warden
    // has killed since: one line says so before it (black-box helper-182 read such lines, stamped
    // after an operator's force release, as written after it).
    const pipeLines = (stream: NodeJS.ReadableStream, label: string) => {
      let rest = "";
      let readAt = performance.now();
      stream.setEncoding("utf8");
      stream.on("data", (chunk: string) => {
        const stall = stepWarden.stalledSince(readAt);
        readAt = performance.now();
        if (stall !== null)
          context.log(
            `[${step.name}${label}] this worker did not run for ${Math.round(stall)} ms: the output below may have been written during that time (stamped when read)`,
          );
        const lines = (rest + chunk).split("\n");
        rest = lines.pop() ?? "";
        for (const line of lines) {
          if (label && cgroups && line.startsWith(CGROUP_JOIN_FAILED_LINE)) joinFailed = true;
          // Only the step's first stderr line: a starter that could not start the program says so
          // before anything else runs (a program's own "env: …: No such file" later is its own).
          if (label && shielded && stderrLines === 0 && nsenterFailed(line, cwd)) enterFailed = true;
          if (label && argv.length > 0 && stderrLines === 0 && SHELL_NOT_STARTED.test(line)) shellNotStarted = true;
          if (label) stderrLines += 1;
          context.log(`[${step.name}${label}] ${line.slice(0, MAX_LINE)}`);
        }
        if (rest.length > MAX_LINE) {
          context.log(`[${step.name}${label}] ${rest.slice(0, MAX_LINE)}`);
          rest = "";
        }
      });
      stream.on("end", () => rest && context.log(`[${step.name}${label}] ${rest.slice(0, MAX_LINE)}`));
    };
    pipeLines(child.stdout!, "");
    pipeLines(child.stderr!, " stderr");

    let killTimer: NodeJS.Timeout | undefined;
    let exited = false;
    let forgotten = false;
    const onAbort = () => {
      if (exited) return; // ended already: its PIDs may be reused; the exit path killed the rest
      // The warden may have killed it while this worker stood still (its exit not seen yet): what
      // is sent now is for anything left, not a step that ran until now.
      const killed = wardenId !== null ? stepWarden.reportedKill(wardenId) : null;
      // A stand-still that ended within the last second (or goes on): the abort comes right after it.
      const stall = killed ? null : stepWarden.stalledSince(Math.max(spawnedAt, performance.now() - 1_000));
      context.log(
        killed
          ? `[${step.name}] aborting: the step warden killed it already (${killed.reason}); SIGTERM to anything left, SIGKILL in ${step.killGrace} ms`
          : stall !== null
            ? `[${step.name}] aborting: SIGTERM, SIGKILL in ${step.killGrace} ms (this worker did not run for ${Math.round(stall)} ms just before: the step warden may have killed it then; its end below says)`
            : `[${step.name}] aborting: SIGTERM, SIGKILL in ${step.killGrace} ms`,
      );
      terminateStep(live, () => exited);
      killTimer = setTimeout(() => killStep(live), step.killGrace);
    };
    context.signal.addEventListener("abort", onAbort, { once: true });

    let outcome: { code: number | null; signal: NodeJS.Signals | null; error?: Error };
    /** A cgroup of the step that still held processes after it was killed (uninterruptible I/O). */
    let cgroupLeft: string | null = null;
    try {
      outcome = await new Promise((resolve) => {
        child.once("error", (error) => resolve({ code: null, signal: null, error }));
        // The step ends with its program, not with its output pipes: see DRAIN_MS.
        child.once("exit", (code, signal) => {
          // Its PID may be reused from now on (a step cgroup stays the warden's until removed): no
          // PID-based kill after this (the abort's timer, killAllSteps); the exit path below kills
          // what is left.
          exited = true;
          if (killTimer) clearTimeout(killTimer);
          liveSteps.delete(live);
          if (wardenId !== null && !stepCgroup) stepWarden.forget(wardenId);
          forgotten = !stepCgroup;
          // As a shell would report it (today's init did): 128 + signal.
          const signalNumber = signal ? os.constants.signals[signal] : undefined;
          resolve(signalNumber === undefined ? { code, signal } : { code: 128 + signalNumber, signal });
        });
      });
      exited = true;
      // Process-group and cgroup mode: whatever the program left goes with it (and a daemon's
      // hold on the output pipes with it).
      if (containment.mode !== "pid-namespace") killStep(live);
      await drained(child);
    } finally {
      context.signal.removeEventListener("abort", onAbort);
      if (killTimer) clearTimeout(killTimer);
      liveSteps.delete(live);
      if (stepCgroup && !(await stepCgroup.remove())) {
        cgroupLeft = stepCgroup.dir;
        context.log(`[${step.name}] could not remove its cgroup ${stepCgroup.dir}: processes still in it`);
      }
      if (wardenId !== null && !forgotten) stepWarden.forget(wardenId); // a spawn error: no exit event
    }
    // Killed by the warden: this worker stopped running past its limit (the job goes back; its
    // lock may be another attempt's already) — never the program's own failure.
    const wardenKill =
      wardenId !== null && (outcome.signal === "SIGKILL" || outcome.code === 137)
        ? await stepWarden.killedBecause(wardenId)
        : null;
    const limitHit = cgroups?.limitHit() ?? null;
    const cgroupsLeft = (await cgroups?.remove()) ?? [];
    if (cgroupsLeft.length > 0)
      context.log(`[${step.name}] could not remove cgroup(s) ${cgroupsLeft.join(", ")}: processes still in them`);

    const killedByWarden = wardenKill
      ? new WorkerStalledError(`step ${step.name} was killed by the step warden: ${wardenKill.reason}`, wardenKill.at)
      : null;
    // A step the warden killed, then aborted: the stall that made the warden kill it also let
    // BullMQ's job lock run out (the record names the cause, not its consequence); any other
    // abort (a force release, a lost claim, a cancel) is what the attempt acts on, and it tells
    // the kill with it (build-and-publish.ts).
    if (killedByWarden && context.signal.aborted) throw killedByWarden;
    context.signal.throwIfAborted();
    if (stalledAtSpawn !== null)
      throw new WorkerStalledError(`step ${step.name} was killed as it started: ${stalledAtSpawn}`);
    if (killedByWarden) throw killedByWarden;
    // A process of the step may still write: nothing of this attempt may be hashed or published.
    const left = cgroupLeft ?? cgroupsLeft[0];
    if (left !== undefined)
      throw new TransientStepError(
        `step ${step.name}: its cgroup ${left} could not be emptied and removed after the step was killed (a process in uninterruptible I/O?): nothing of this attempt is published while one of its processes may run`,
      );
    if (outcome.error) {
      const code = (outcome.error as NodeJS.ErrnoException).code;
      if (stepCgroup && (code === "ENOENT" || code === "EACCES" || code === "ENOTDIR" || code === "ELOOP")) {
        if (!fs.existsSync(cwd))
          throw new StepFailedError(`step ${step.name}: its working directory ${cwd} does not exist`);
        throw new StepFailedError(`step ${step.name}: program not found or not executable: ${program}`);
      }
      if (code === "ENOENT" && !fs.existsSync(cwd))
        throw new StepFailedError(`step ${step.name}: its working directory ${cwd} does not exist`);
      if (code === "ENOENT")
        throw new StepFailedError(`step ${step.name}: cannot start ${argv[0]} (is util-linux installed?)`);
      if (code && TRANSIENT_ERRNO.has(code))
        throw new TransientStepError(`step ${step.name}: ${outcome.error.message}`);
      throw new StepFailedError(`step ${step.name}: ${outcome.error.message}`);
    }
    if (limitHit) throw new StepFailedError(`step ${step.name} ${limitHit}`);
    if (outcome.code === 0) return;
    if (outcome.code !== null && NOT_STARTED.includes(outcome.code) && shellNotStarted)
      throw new StepFailedError(`step ${step.name}: program not found or not executable: ${program}`);
    if (outcome.code === 125 && joinFailed)
      throw new TransientStepError(`step ${step.name}: could not join its cgroup`);
    if (outcome.code === 1 && enterFailed) {
      buildsNamespace.retireEntry(entry!, "a step could not enter it");
      throw new TransientStepError(
        `step ${step.name}: not started: it could not enter the worker's namespace for read-only builds (see the run log)`,
      );
    }
    if (outcome.code !== null && step.transientExitCodes.includes(outcome.code)) {
      throw new TransientStepError(`step ${step.name} exited ${outcome.code} (declared transient)`);
    }
    const killedBy = outcome.code !== null && outcome.code > 128 ? signalName(outcome.code - 128) : null;
    throw new StepFailedError(
      `step ${step.name} ${
        outcome.code === null
          ? `was killed by ${outcome.signal}`
          : killedBy
            ? `was killed by ${killedBy}`
            : `exited ${outcome.code}`
      }`,
    );
  } finally {
    entry?.release(); // the step ended, or never started
  }
}

/** Makes `<output>/builds` for the shield's mount, or fails the step saying why. */
function makeBuildsDir(stepName: string, dir: string): void {
  try {
    fs.mkdirSync(dir, { recursive: true });
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    const message = `step ${stepName}: not started: cannot make ${dir}: ${(error as Error).message}`;
    if (code === "EEXIST" || code === "ENOTDIR") throw new StepFailedError(message);
    throw new TransientStepError(message);
  }
}

/** Test-only hooks (never set in production). */
export const stepTestHooks: { beforeSpawn?: () => void } = {};

/** errno codes of a spawn that no retry can fix: the arguments or the program's path. */
const PERMANENT_SPAWN_ERRNO: Record<string, string> = {
  E2BIG: "its arguments and environment are larger than the kernel accepts (E2BIG)",
  ENAMETOOLONG: "its program's path is longer than the kernel accepts (ENAMETOOLONG)",
};

/** The step's error for a spawn (or the move into its cgroup) that threw: nothing runs. */
function spawnThrew(stepName: string, error: unknown): Error {
  const code = (error as NodeJS.ErrnoException).code;
  const message = `step ${stepName}: not started: ${(error as Error).message}`;
  if (code && PERMANENT_SPAWN_ERRNO[code])
    return new StepFailedError(`step ${stepName}: not started: ${PERMANENT_SPAWN_ERRNO[code]}`);
  return code && !code.startsWith("ERR_") ? new TransientStepError(message) : new StepFailedError(message);
}

/** Waits for the step's output pipes to close, at most DRAIN_MS; then stops reading them. */
async function drained(child: ChildProcess): Promise<void> {
  const streams = [child.stdout!, child.stderr!].filter((s) => !s.closed);
  if (streams.length === 0) return;
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([
    Promise.all(streams.map((s) => new Promise((resolve) => s.once("close", resolve)))),
    new Promise((resolve) => (timer = setTimeout(resolve, DRAIN_MS))),
  ]);
  clearTimeout(timer);
  for (const stream of streams) stream.destroy();
}

function signalName(number: number): string {
  const entry = Object.entries(os.constants.signals).find(([, n]) => n === number);
  return entry ? entry[0] : `signal ${number}`;
}

/** A cgroup directory name for one step of one run (run ids and step names are plain already). */
function cgroupName(runId: string, stepName: string): string {
  return `${runId}-${stepName}-${process.pid}`.replace(/[^A-Za-z0-9_.-]/g, "_").slice(0, 200);
}

/** errno codes that describe a passing condition: worth another attempt. */
export const TRANSIENT_ERRNO = new Set([
  "EIO",
  "EAGAIN",
  "EBUSY",
  "ECONNRESET",
  "ECONNREFUSED",
  "ETIMEDOUT",
  "EPIPE",
  "ENETUNREACH",
  "EHOSTUNREACH",
  "EAI_AGAIN",
  "EMFILE",
  "ENFILE",
  "ENOSPC",
  "EDQUOT",
  // A filesystem remounted read-only (by the kernel after an error, or for maintenance): it is
  // writable again once remounted, as a full disk is once space is freed.
  "EROFS",
]);
