/** The dashboard's alert evaluator, on the web context's connections; retried until Redis is there. */
import { getWebContext } from "../web/context";
import { startAlerting } from "./start";

const holder = globalThis as typeof globalThis & { __claimwatchAlerts?: boolean };

export function startWebAlerting(): void {
  if (holder.__claimwatchAlerts) return;
  holder.__claimwatchAlerts = true;
  const log = (line: string) => process.stdout.write(`[web] ${line}\n`);
  const attempt = (delayMs: number) => {
    try {
      const { connections, definitions, config, queue } = getWebContext();
      // No signal handler here: one would replace Next's own exit on SIGTERM. The claim expires
      // after 3 × evaluateEvery and another process takes over.
      startAlerting({
        main: connections.main,
        claims: connections.claims,
        keys: connections.keys,
        definitions,
        schedulers: queue,
        config,
        role: "web",
        log,
      });
    } catch (error) {
      log(`alerts: cannot start yet (${(error as Error).message}); retrying`);
      setTimeout(() => attempt(Math.min(delayMs * 2, 30_000)), delayMs).unref();
    }
  };
  attempt(1_000);
}
