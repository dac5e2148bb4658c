/**
 * The worker's side of the step warden (warden-main.mjs): one process per worker that SIGKILLs
 * the worker's steps when the worker dies (its pipe closes) or stops running for longer than
 * its job lock lasts (event loop blocked, process SIGSTOPped) — the dead-man switch that keeps a
 * stuck attempt's steps from writing beside the attempt BullMQ hands the job to next.
 *
 * Started on the first step, restarted if it dies (the steps it watched are announced again).
 * The worker beats every BEAT_EVERY_MS while steps run; a step announces itself right after its
 * spawn (`watch`) and leaves when it ended (`forget`). Each step's environment carries
 * `CLAIMWATCH_STEP_OF=<worker pid>`, so a step spawned a moment before the worker died is found
 * too.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { fileURLToPath } from "node:url";

/** How often the worker says it runs, while it has steps. */
const BEAT_EVERY_MS = 500;
/** How long a step's exit waits for the warden's report of a kill (its pipe may lag the exit). */
const REPORT_WAIT_MS = 300;

export const STEP_OF_VARIABLE = "CLAIMWATCH_STEP_OF";

interface Watched {
  pid: number;
  group: boolean;
}

class StepWarden {
  private child: ChildProcess | null = null;
  private readonly watched = new Map<string, Watched>();
  private readonly reports = new Map<string, string>();
  private readonly waiting = new Map<string, (reason: string) => void>();
  private beat: NodeJS.Timeout | undefined;
  private nextId = 0;
  private silenceMs = 0;
  private startedAt = 0;
  private warned = false;

  /** The longest this worker may stop running while it has steps (its BullMQ lock duration). */
  setSilenceLimit(ms: number): void {
    this.silenceMs = Math.max(0, Math.round(ms));
    this.send(`silence ${this.silenceMs}`);
  }

  /** Announces a step just spawned: `pid` is `unshare --kill-child` (group false) or a process group leader. */
  watch(pid: number, group: boolean): string {
    const id = String(++this.nextId);
    this.watched.set(id, { pid, group });
    this.ensureRunning();
    this.send(`watch ${id} ${pid} ${group ? 1 : 0}`);
    this.beat ??= setInterval(() => this.send("beat"), BEAT_EVERY_MS).unref();
    return id;
  }

  /** The step ended. */
  forget(id: string): void {
    this.watched.delete(id);
    this.reports.delete(id);
    this.waiting.delete(id);
    this.send(`forget ${id}`);
    if (this.watched.size === 0 && this.beat) {
      clearInterval(this.beat);
      this.beat = undefined;
    }
  }

  /** Why the warden killed this step, if it did (waits briefly for its report); else null. */
  async killedBecause(id: string): Promise<string | null> {
    const known = this.reports.get(id);
    if (known !== undefined || !this.child) return known ?? null;
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.waiting.delete(id);
        resolve(null);
      }, REPORT_WAIT_MS);
      this.waiting.set(id, (reason) => {
        clearTimeout(timer);
        resolve(reason);
      });
    });
  }

  private ensureRunning(): void {
    if (this.child) return;
    const main = fileURLToPath(new URL("./warden-main.mjs", import.meta.url));
    // Its own process group (a SIGSTOP or ^C sent to the worker's group does not reach it) and
    // an empty environment (nothing of the worker's, such as a test's marker, goes with it).
    const child = spawn(process.execPath, [main, String(process.pid)], {
      stdio: ["pipe", "pipe", "inherit"],
      detached: true,
      env: {} as NodeJS.ProcessEnv,
    });
    this.child = child;
    this.startedAt = performance.now();
    child.unref();
    (child.stdout as unknown as { unref?: () => void }).unref?.();
    (child.stdin as unknown as { unref?: () => void }).unref?.();
    child.stdin!.on("error", () => {});
    let rest = "";
    child.stdout!.setEncoding("utf8");
    child.stdout!.on("data", (chunk: string) => {
      const lines = (rest + chunk).split("\n");
      rest = lines.pop() ?? "";
      for (const line of lines) {
        const match = /^killed (\S+) (.*)$/.exec(line);
        if (!match) continue;
        const [, id, reason] = match as unknown as [string, string, string];
        this.reports.set(id, reason);
        this.waiting.get(id)?.(reason);
        this.waiting.delete(id);
      }
    });
    child.once("error", (error) => {
      // Cannot start (no `node` at process.execPath?): the steps run without it, said once.
      if (this.child === child) this.child = null;
      if (!this.warned) console.error(`claimwatch-worker: the step warden did not start: ${error.message}`);
      this.warned = true;
    });
    child.once("exit", () => {
      if (this.child !== child) return;
      this.child = null;
      // Restarted while steps run, with what it watched (at most once a second).
      if (this.watched.size === 0) return;
      const restart = () => {
        if (this.child || this.watched.size === 0) return;
        this.ensureRunning();
        for (const [id, step] of this.watched) this.send(`watch ${id} ${step.pid} ${step.group ? 1 : 0}`);
      };
      if (performance.now() - this.startedAt >= 1_000) restart();
      else setTimeout(restart, 1_000).unref();
    });
    if (this.silenceMs > 0) this.send(`silence ${this.silenceMs}`);
  }

  private send(line: string): void {
    if (!this.child?.stdin?.writable) return;
    this.child.stdin.write(`${line}\n`);
  }
}

/** This process's warden (one per worker). */
export const stepWarden = new StepWarden();
