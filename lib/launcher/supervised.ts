/**
 * One child of `npm start` kept running (the worker, the web server, the embedded Redis): started
 * again when it exits on its own — when, and when to give up instead, is lib/launcher/restarts.ts.
 * The launcher (scripts/start.ts) owns the shutdown: `stop()` cancels a restart that is due,
 * waits for one under way, then stops the child. A child that refuses its configuration (exit 2)
 * because the definitions file was edited into a bad state while it ran (the launcher's own check
 * of the file says so now) is started again once that check passes, while the others keep serving;
 * any other refusal (the host's containment, the environment) stops everything, exit 2, as before.
 */
import { CONFIG_EXIT_CODE } from "../config";
import type { RedisServerHandle } from "../redis/embedded";
import type { Child, ChildExit } from "./children";
import { describeExit, RestartBudget, type RestartPolicy } from "./restarts";

/** A child as the supervisor sees it. */
export interface Running {
  pid: number;
  exited: Promise<ChildExit>;
  stop(graceMs: number): Promise<void>;
}

export const runningChild = (child: Child): Running => ({
  pid: child.process.pid ?? -1,
  exited: child.exited,
  stop: (graceMs) => child.stop(graceMs),
});

export function runningRedis(handle: RedisServerHandle): Running {
  const exited = new Promise<ChildExit>((resolve) => {
    if (handle.child.exitCode !== null || handle.child.signalCode !== null) {
      resolve({ code: handle.child.exitCode, signal: handle.child.signalCode });
    } else handle.child.once("exit", (code, signal) => resolve({ code, signal }));
  });
  return { pid: handle.pid, exited, stop: (graceMs) => handle.stop(graceMs) };
}

export interface SupervisedOptions {
  /** "worker", "web server", "embedded Redis": named so in every line. */
  label: string;
  first: Running;
  startAgain: () => Promise<Running>;
  /** Whether the launcher is stopping: then an exit is expected and nothing starts again. */
  stopping: () => boolean;
  /** Stops everything (a crash loop: exit 1; a child that refused its configuration: exit 2). */
  giveUp: (reason: string, exitCode: number) => void;
  /** Records a new child where others look for it (state files); may throw (said, not fatal). */
  record: (running: Running) => void;
  say: (line: string) => void;
  /** Whether an exit with CONFIG_EXIT_CODE means "refused its configuration" (not for Redis). */
  configExits?: boolean;
  /**
   * The configuration a refusal may be about: what it is named in the lines that say so, a stamp
   * of it (e.g. its file's mtime and size) and the launcher's own check of it (the problem, or null
   * when it loads). An exit 2 while the check finds a problem waits for the check to pass; while it
   * passes, a refusal is taken as the configuration's only if the stamp changed since the child
   * started (fixed meanwhile: started again once). Without it a refusal stops everything, exit 2.
   */
  configCheck?: { what: string; stamp: () => string; problem: () => string | null };
  /** How often the check runs while a refusal waits (default 1 s). */
  configPollMs?: number;
  /** When to start it again (default RESTART_POLICY). */
  policy?: RestartPolicy;
}

export class Supervised {
  current: Running;
  private readonly budget: RestartBudget;
  private timer: NodeJS.Timeout | undefined;
  private starting: Promise<void> | undefined;

  /** The configuration's stamp when the current child was started: a refusal waits for another. */
  private startedWith: string | undefined;

  constructor(private readonly options: SupervisedOptions) {
    this.budget = new RestartBudget(options.policy);
    this.current = options.first;
    this.startedWith = this.configNow();
    this.watch(options.first);
  }

  private configNow(): string | undefined {
    try {
      return this.options.configCheck?.stamp();
    } catch {
      return undefined; // unreadable (being replaced): any later stamp is a change
    }
  }

  private configProblem(): string | null {
    try {
      return this.options.configCheck?.problem() ?? null;
    } catch (error) {
      return String(error);
    }
  }

  private watch(running: Running): void {
    void running.exited.then((exit) =>
      this.exited(running, `the ${this.options.label} (pid ${running.pid}) ${describeExit(exit)}`, exit.code),
    );
  }

  /** `what`: "the worker (pid 7) was killed by SIGKILL", or why a new one could not start. */
  private exited(running: Running, what: string, code: number | null): void {
    const { label, stopping, giveUp, say, configCheck } = this.options;
    if (stopping() || running !== this.current) return;
    // A child that refused its configuration (exit 2, its one line above) would refuse it again
    // until the configuration is fixed: when the launcher's own check of the definitions file
    // refuses it too (edited into a bad state while everything ran), the others keep serving (the
    // dashboard says no worker is live) and it is started again once the check passes. Not a
    // crash: not counted in the restart budget. Any other refusal stops everything, exit 2.
    if (code === CONFIG_EXIT_CODE && (this.options.configExits ?? true)) {
      const refused = `the ${label} refused its configuration (above)`;
      if (!configCheck) return giveUp(refused, CONFIG_EXIT_CODE);
      const problem = this.configProblem();
      if (problem === null) {
        // Fixed since the child started (the stamp moved): started again once.
        const now = this.configNow();
        if (now !== undefined && now !== this.startedWith) {
          say(`${refused}; ${configCheck.what} changed since it started and loads now: starting it again`);
          this.starting = this.start(running).finally(() => (this.starting = undefined));
          return;
        }
        return giveUp(refused, CONFIG_EXIT_CODE);
      }
      say(
        `${refused}: ${problem}; everything else keeps running: fix ${configCheck.what}, ` +
          `and the ${label} is started again once it loads`,
      );
      return this.whenConfigLoads(running);
    }
    const decision = this.budget.exited(Date.now());
    if (!decision.restart)
      return giveUp(`${what}; it ended ${decision.exits} times within ${decision.windowMs / 1000} s`, 1);
    say(`${what}; starting it again in ${decision.delayMs / 1000} s (restart ${decision.restartNumber})`);
    this.timer = setTimeout(() => {
      this.timer = undefined;
      if (stopping()) return;
      this.starting = this.start(running).finally(() => (this.starting = undefined));
    }, decision.delayMs);
  }

  /** Starts the child again once the launcher's check of the configuration passes. */
  private whenConfigLoads(running: Running): void {
    this.timer = setTimeout(() => {
      this.timer = undefined;
      if (this.options.stopping()) return;
      if (this.configProblem() !== null) return this.whenConfigLoads(running);
      this.options.say(`${this.options.configCheck!.what} loads now: starting the ${this.options.label} again`);
      this.starting = this.start(running).finally(() => (this.starting = undefined));
    }, this.options.configPollMs ?? 1_000);
  }

  private async start(previous: Running): Promise<void> {
    const { label, startAgain, record, stopping, say } = this.options;
    let next: Running;
    const startedWith = this.configNow();
    try {
      next = await startAgain();
    } catch (error) {
      return this.exited(previous, `the ${label} could not be started again (${(error as Error).message})`, null);
    }
    this.current = next;
    this.startedWith = startedWith;
    // Recorded even when a stop began meanwhile (it stops `next` only after this start): a
    // launcher killed before then must leave nothing the next start cannot find.
    try {
      record(next);
    } catch (error) {
      say(`could not record the new ${label} (pid ${next.pid}): ${(error as Error).message}`);
    }
    if (stopping()) return;
    say(`the ${label} was started again (pid ${next.pid})`);
    this.watch(next);
  }

  /** Cancels a restart that is due, waits for one under way, then stops the child. */
  async stop(graceMs: number): Promise<void> {
    clearTimeout(this.timer);
    await this.starting;
    await this.current.stop(graceMs);
  }
}
