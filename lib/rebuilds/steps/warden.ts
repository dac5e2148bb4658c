/**
 * The worker's side of the step warden (warden-main.mjs): one process per worker that SIGKILLs
 * the worker's steps (`cgroup.kill` in `cgroup` mode) when the worker dies (its pipe closes) or
 * stops running for longer than `silence` (event loop blocked, process SIGSTOPped) — the dead-man switch that keeps a stuck
 * attempt's steps from writing beside the attempt BullMQ hands the job to next.
 *
 * The worker starts it once (`start`), beats every BEAT_EVERY_MS from then on, announces each
 * step right after its spawn (`watch`) — a step's cgroup before it (`watchCgroup`) — and forgets
 * it when it exits (its cgroup: when removed). A step is never spawned
 * while the warden is down (`ready`), and a restarted warden is told every step again. Each
 * step's environment carries `CLAIMWATCH_STEP_OF=<worker pid>`, so a step spawned a moment before
 * the worker died is found too.
 *
 * The same beat tells the worker that it stalled itself: an attempt during which the worker did
 * not run for `silence` ms may have lost its job lock, so it starts nothing more under the claim
 * (`throwIfStalled`) and hands the job back instead.
 *
 * The silence limit (`wardenSilenceFor`) must end a stuck worker's steps before its job lock can
 * run out. The worker sets BullMQ's `lockRenewTime` to a quarter of the lock (`lockRenewTimeFor`):
 * BullMQ checks every half of that and renews a lock older than it, so two renewals are at most a
 * quarter of the lock apart and at any moment at least three quarters of it are left; the warden
 * acts within `silence` + one tick of the last beat. While the worker's clock slews back to the
 * Redis clock (lib/redis/clock.ts: `Date.now` at 9/10 speed, rarely: the Redis clock went back),
 * renewals come up to a ninth later (139 ms at the 5 s lock), inside the 650 ms margin below.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { fileURLToPath } from "node:url";
import { WorkerStalledError } from "./context";

/** How often the worker says it runs. */
export const BEAT_EVERY_MS = 500;
/**
 * Beats the warden may leave unanswered (3 s) before the worker takes it for stopped or hung
 * (SIGSTOPped alone, a hung system call): it is SIGKILLed and another started, told every step,
 * and no step starts meanwhile (helper-135: a frozen warden let steps start, and run on
 * through their worker's stop). The warden answers each beat at once; a worker that stalled
 * itself sends no beats meanwhile, so its own stall does not count. A warden that has not
 * answered yet since its start gets STARTING_BEATS_MAX (15 s): a Node start-up on a loaded host
 * can take seconds, and what the worker sent meanwhile waits in the pipe.
 */
const UNANSWERED_BEATS_MAX = 6;
const STARTING_BEATS_MAX = 30;
/** The longest list of what a restarted warden is told given as its start argument, in bytes (see `ensureRunning`). */
const KNOWN_ARGUMENT_MAX = 64 * 1024;
/** The warden's own check interval (warden-main.mjs). */
const WARDEN_TICK_MS = 100;
/** How long a step's exit waits for the warden's report of a kill (its pipe may lag the exit). */
const REPORT_WAIT_MS = 300;
/** Kill reports kept for steps whose exit has not asked yet. */
const MAX_REPORTS = 1_000;

export const STEP_OF_VARIABLE = "CLAIMWATCH_STEP_OF";

/** A step the warden killed: why, and when on the host's monotonic clock (`monotonicNowMs`). */
export interface WardenKill {
  reason: string;
  at: number;
}

/** The host's monotonic clock in ms (CLOCK_MONOTONIC: one clock for every process on the host). */
export function monotonicNowMs(): number {
  return Number(process.hrtime.bigint() / 1_000_000n);
}

/**
 * The silence after which a worker's steps are killed, for a BullMQ lock of `lockDurationMs`:
 * before the earliest moment the lock can expire (¾ of it after the stall began, the renewal
 * running every ¼), less one warden tick and a margin for the kill and the next attempt's start.
 */
export function wardenSilenceFor(lockDurationMs: number): number {
  return Math.max(1_000, lockDurationMs - lockRenewTimeFor(lockDurationMs) - WARDEN_TICK_MS - 650);
}

/** BullMQ's `lockRenewTime` for a lock of `lockDurationMs` (see above; BullMQ's default is half). */
export function lockRenewTimeFor(lockDurationMs: number): number {
  return Math.floor(lockDurationMs / 4);
}

/** A step as the warden kills it: a process (`unshare --kill-child` or a group leader), or a step cgroup. */
type Watched = { pid: number; group: boolean } | { cgroup: string };

function watchLine(id: string, step: Watched): string {
  return "cgroup" in step ? `watch-cgroup ${id} ${step.cgroup}` : `watch ${id} ${step.pid} ${step.group ? 1 : 0}`;
}

class StepWarden {
  private child: ChildProcess | null = null;
  private readonly watched = new Map<string, Watched>();
  private readonly reports = new Map<string, WardenKill>();
  private readonly waiting = new Map<string, (kill: WardenKill) => void>();
  private beat: NodeJS.Timeout | undefined;
  private lastBeat = performance.now();
  /** The end of the last stall of at least `silence` ms, and how long it was. */
  private lastStall: { endedAt: number; ms: number } | null = null;
  private nextId = 0;
  private silenceMs = 0;
  private startedAt = 0;
  private warned = false;
  /** Beats sent, and the last one the warden answered (`beat <n>` both ways). */
  private beatsSent = 0;
  private beatsAnswered = 0;
  /** The running warden answered a beat since its start. */
  private answeredSinceStart = false;

  /** Starts the warden and the beat (idempotent); the worker calls it at start-up. */
  start(silenceMs: number): void {
    // Start-up itself (imports, connections) is not a stall of any attempt.
    this.lastBeat = performance.now();
    this.lastStall = null;
    this.silenceMs = Math.max(0, Math.round(silenceMs));
    this.ensureRunning();
    this.send(`silence ${this.silenceMs}`);
  }

  /** The warden runs (started now if need be) and answers: a step may be spawned. */
  ready(): boolean {
    this.ensureRunning();
    return this.child !== null && !this.deaf();
  }

  /**
   * The warden runs and has answered since its start (waited for up to `timeoutMs`): a step may be
   * spawned. A warden that has not answered yet may be the frozen or hung one (review helper-140):
   * `ready` alone would let steps start under it for the 15 s it gets before it is replaced.
   */
  async answering(timeoutMs: number): Promise<boolean> {
    const deadline = performance.now() + timeoutMs;
    for (;;) {
      if (this.ready() && this.answeredSinceStart) return true;
      if (performance.now() >= deadline) return false;
      await new Promise((resolve) => setTimeout(resolve, 25));
    }
  }

  /** The running warden left too many beats unanswered (UNANSWERED_BEATS_MAX, STARTING_BEATS_MAX). */
  private deaf(): boolean {
    const limit = this.answeredSinceStart ? UNANSWERED_BEATS_MAX : STARTING_BEATS_MAX;
    return this.beatsSent - this.beatsAnswered > limit;
  }

  /**
   * Throws `WorkerStalledError` when this worker did not run for `silence` ms at some point
   * since `since` (performance.now()), or is just coming out of such a stall.
   */
  throwIfStalled(since: number, what: string): void {
    const stall = this.stalledSince(since);
    if (stall === null) return;
    throw new WorkerStalledError(
      `${what}: this worker did not run for ${Math.round(stall)} ms during the attempt (limit ${this.silenceMs} ms), so its job lock may have run out and another attempt may hold the claim`,
    );
  }

  /** A stall of at least `silence` ms that ended after `since` (or goes on now): its length, else null. */
  stalledSince(since: number): number | null {
    if (this.silenceMs <= 0) return null;
    const current = performance.now() - this.lastBeat;
    if (current >= this.silenceMs) return current;
    return this.lastStall && this.lastStall.endedAt >= since ? this.lastStall.ms : null;
  }

  /** Announces a step just spawned: `pid` is `unshare --kill-child` (group false) or a process group leader. */
  watch(pid: number, group: boolean): string {
    return this.announce({ pid, group });
  }

  /**
   * Announces a step's cgroup (step-cgroup.ts) before the worker enters it to spawn: the warden
   * then knows every cgroup the worker can be inside when it has to kill. Forgotten only once
   * the cgroup is removed.
   */
  watchCgroup(dir: string): string {
    return this.announce({ cgroup: dir });
  }

  private announce(step: Watched): string {
    const id = String(++this.nextId);
    this.watched.set(id, step);
    this.ensureRunning();
    this.send(watchLine(id, step));
    return id;
  }

  /** The step exited (cgroup: was removed): its PID or cgroup is no longer the warden's to kill. */
  forget(id: string): void {
    this.watched.delete(id);
    this.send(`forget ${id}`);
  }

  /** Why and when the warden killed this step, if its report has arrived already (kept for `killedBecause`); else null. */
  reportedKill(id: string): WardenKill | null {
    return this.reports.get(id) ?? null;
  }

  /** Why and when the warden killed this step, if it did (waits briefly for its report); else null. */
  async killedBecause(id: string): Promise<WardenKill | null> {
    const known = this.reports.get(id);
    this.reports.delete(id);
    if (known !== undefined || !this.child) return known ?? null;
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.waiting.delete(id);
        resolve(null);
      }, REPORT_WAIT_MS);
      this.waiting.set(id, (kill) => {
        clearTimeout(timer);
        this.reports.delete(id);
        resolve(kill);
      });
    });
  }

  private tick(): void {
    const now = performance.now();
    const gap = now - this.lastBeat;
    if (this.silenceMs > 0 && gap >= this.silenceMs) this.lastStall = { endedAt: now, ms: gap };
    this.lastBeat = now;
    this.send(`beat ${++this.beatsSent}`);
    this.replaceIfDeaf();
  }

  /** A warden that left too many beats unanswered (`deaf`) is SIGKILLed and another started. */
  private replaceIfDeaf(): void {
    const child = this.child;
    if (!child || !this.deaf()) return;
    const unanswered = this.beatsSent - this.beatsAnswered;
    console.error(
      `claimwatch-worker: the step warden (pid ${child.pid}) did not answer for ${(unanswered * BEAT_EVERY_MS) / 1000} s (stopped or hung?); killing it and starting another`,
    );
    this.child = null;
    child.kill("SIGKILL");
    this.ensureRunning();
  }

  private ensureRunning(): void {
    this.beat ??= setInterval(() => this.tick(), BEAT_EVERY_MS).unref();
    if (this.child) return;
    const main = fileURLToPath(new URL("./warden-main.mjs", import.meta.url));
    // Its own process group (a SIGSTOP or ^C sent to the worker's group does not reach it) and
    // an empty environment (nothing of the worker's, such as a test's marker, goes with it).
    // Its silence and the steps watched go with the start (a worker stopped right after this
    // spawn has told them), not after it on the pipe — unless they would not fit in one argument
    // (the kernel's limit is 128 KiB: a thousand steps and more), then on the pipe as well.
    const known = [`silence ${this.silenceMs}`, ...[...this.watched].map(([id, step]) => watchLine(id, step))].join(
      "\n",
    );
    const fits = Buffer.byteLength(known) <= KNOWN_ARGUMENT_MAX;
    const child = spawn(process.execPath, [main, String(process.pid), fits ? known : `silence ${this.silenceMs}`], {
      stdio: ["pipe", "pipe", "inherit"],
      detached: true,
      env: {} as NodeJS.ProcessEnv,
    });
    child.once("error", (error) => {
      // Cannot start (EMFILE, EAGAIN, no node at execPath): no step is spawned until it can.
      if (this.child === child) this.child = null;
      if (!this.warned) console.error(`claimwatch-worker: the step warden did not start: ${error.message}`);
      this.warned = true;
    });
    if (child.pid === undefined || !child.stdin || !child.stdout) return;
    this.child = child;
    this.startedAt = performance.now();
    this.beatsAnswered = this.beatsSent;
    this.answeredSinceStart = false;
    child.unref();
    (child.stdout as unknown as { unref?: () => void }).unref?.();
    (child.stdin as unknown as { unref?: () => void }).unref?.();
    child.stdin.on("error", () => {});
    let rest = "";
    child.stdout.setEncoding("utf8");
    child.stdout.on("data", (chunk: string) => {
      const lines = (rest + chunk).split("\n");
      rest = lines.pop() ?? "";
      for (const line of lines) {
        const answer = /^beat (\d+)$/.exec(line);
        if (answer) {
          if (this.child !== child) continue;
          this.beatsAnswered = Math.max(this.beatsAnswered, Number(answer[1]));
          this.answeredSinceStart = true;
          continue;
        }
        const match = /^killed (\S+) (\d+) (.*)$/.exec(line);
        if (!match) continue;
        const [, id, at, reason] = match as unknown as [string, string, string, string];
        const kill: WardenKill = { reason, at: Number(at) };
        const waiter = this.waiting.get(id);
        this.waiting.delete(id);
        if (waiter) waiter(kill);
        else {
          // Kept until the step's exit asks (it may have been forgotten already): bounded.
          this.reports.set(id, kill);
          if (this.reports.size > MAX_REPORTS) this.reports.delete(this.reports.keys().next().value!);
        }
      }
    });
    if (!fits) this.send(known);
    // A first beat at once: a step waits for the new warden's first answer (`answering`).
    this.send(`beat ${++this.beatsSent}`);
    child.once("exit", () => {
      if (this.child !== child) return;
      this.child = null;
      console.error("claimwatch-worker: the step warden exited; restarting it");
      // Restarted (at most once a second) with what it watched; until then no step starts.
      const restart = () => {
        if (this.child) return;
        this.ensureRunning();
      };
      if (performance.now() - this.startedAt >= 1_000) restart();
      else setTimeout(restart, 1_000).unref();
    });
  }

  private send(line: string): void {
    if (!this.child?.stdin?.writable) return;
    this.child.stdin.write(`${line}\n`);
  }
}

/** This process's warden (one per worker). */
export const stepWarden = new StepWarden();
