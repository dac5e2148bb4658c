/**
 * One child of `npm start` kept running (the worker, the web server, the embedded Redis): started
 * again when it exits on its own — when, and when to give up instead, is lib/launcher/restarts.ts.
 * The launcher (scripts/start.ts) owns the shutdown: `stop()` cancels a restart that is due,
 * waits for one under way, then stops the child.
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
  /** When to start it again (default RESTART_POLICY). */
  policy?: RestartPolicy;
}

export class Supervised {
  current: Running;
  private readonly budget: RestartBudget;
  private timer: NodeJS.Timeout | undefined;
  private starting: Promise<void> | undefined;

  constructor(private readonly options: SupervisedOptions) {
    this.budget = new RestartBudget(options.policy);
    this.current = options.first;
    this.watch(options.first);
  }

  private watch(running: Running): void {
    void running.exited.then((exit) =>
      this.exited(running, `the ${this.options.label} (pid ${running.pid}) ${describeExit(exit)}`, exit.code),
    );
  }

  /** `what`: "the worker (pid 7) was killed by SIGKILL", or why a new one could not start. */
  private exited(running: Running, what: string, code: number | null): void {
    const { label, stopping, giveUp, say } = this.options;
    if (stopping() || running !== this.current) return;
    // A child that refused its configuration (exit 2, its one line above) would refuse it again.
    if (code === CONFIG_EXIT_CODE && (this.options.configExits ?? true)) {
      return giveUp(`the ${label} refused its configuration (above)`, CONFIG_EXIT_CODE);
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

  private async start(previous: Running): Promise<void> {
    const { label, startAgain, record, stopping, say } = this.options;
    let next: Running;
    try {
      next = await startAgain();
    } catch (error) {
      return this.exited(previous, `the ${label} could not be started again (${(error as Error).message})`, null);
    }
    this.current = next;
    // Recorded even when a stop began meanwhile (it stops `next` only after this start): a
    // launcher killed before then must leave nothing the next start cannot find.
    try {
      record(next);
    } catch (error) {
      say(`could not record the new ${label} (pid ${next.pid}): ${(error as Error).message}`);
    }
    if (stopping()) return;
    say(`the ${label} is running again (pid ${next.pid})`);
    this.watch(next);
  }

  /** Cancels a restart that is due, waits for one under way, then stops the child. */
  async stop(graceMs: number): Promise<void> {
    clearTimeout(this.timer);
    await this.starting;
    await this.current.stop(graceMs);
  }
}
