/**
 * When `npm start` starts a child again that exited on its own (a worker killed by the OOM
 * killer or `kill -9`, a crashed web server, a killed embedded Redis): 1 s after the first exit,
 * then after a delay that doubles (capped at `maxDelayMs`, which the default policy's five exits
 * do not reach: 1, 2, 4, 8 s), and never more than
 * `maxExits` times within `windowMs` — a child that keeps exiting (a crash loop) stops the
 * launcher instead, so a supervisor above it (systemd, a container runtime) sees the failure.
 * Exits older than `windowMs` are forgotten: a child that stayed up that long starts again from
 * the first delay.
 */
export interface RestartPolicy {
  firstDelayMs: number;
  maxDelayMs: number;
  /** Unexpected exits within `windowMs` that end the launcher (the last one is not restarted). */
  maxExits: number;
  windowMs: number;
}

export const RESTART_POLICY: RestartPolicy = {
  firstDelayMs: 1_000,
  maxDelayMs: 30_000,
  maxExits: 5,
  windowMs: 120_000,
};

export type RestartDecision =
  | { restart: true; delayMs: number; /** 1 for the first restart in the window. */ restartNumber: number }
  | { restart: false; exits: number; windowMs: number };

/** One child's unexpected exits; `exited(now)` says whether (and when) to start it again. */
export class RestartBudget {
  private exits: number[] = [];

  constructor(private readonly policy: RestartPolicy = RESTART_POLICY) {}

  exited(now: number): RestartDecision {
    this.exits = [...this.exits.filter((at) => now - at < this.policy.windowMs), now];
    const count = this.exits.length;
    if (count >= this.policy.maxExits) return { restart: false, exits: count, windowMs: this.policy.windowMs };
    const delayMs = Math.min(this.policy.firstDelayMs * 2 ** (count - 1), this.policy.maxDelayMs);
    return { restart: true, delayMs, restartNumber: count };
  }
}

/** How a child process ended, for a log line: "exited with code 1", "was killed by SIGKILL". */
export function describeExit(exit: { code: number | null; signal: NodeJS.Signals | null }): string {
  if (exit.signal) return `was killed by ${exit.signal}`;
  if (exit.code !== null) return `exited with code ${exit.code}`;
  return "could not be started";
}
