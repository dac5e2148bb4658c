import { describeError } from "../describe-error";
import { checkHealth, HEALTH_DEADLINE_MS, unconfiguredHealth, type HealthReport } from "../health/health";
import { triggerReplicaProblems } from "../health/redis-safety";
import { missedTickProblems, staleClaimProblems, liveWorkerProblems } from "../health/operations";
import { changedBuildProblems } from "../rebuilds/build-integrity";
import { getWebContext, type WebContext } from "./context";

/** How often an anonymous probe starts the operational checks anew (load balancers probe often). */
export const ANONYMOUS_CHECKS_REUSED_MS = 5_000;

/**
 * The web server's health report, never throws. Logged-in callers get the operational checks
 * (stale claims, missed ticks, changed builds, workers) made now; anonymous probes get the last
 * ones that finished, started anew at most every ANONYMOUS_CHECKS_REUSED_MS in the background
 * (they see only their count): a probe costs no more than the Redis checks, and answers as fast.
 */
export async function currentHealth(options: { anonymous?: boolean } = {}): Promise<HealthReport> {
  let context;
  try {
    context = getWebContext();
  } catch (error) {
    return unconfiguredHealth(describeError(error));
  }
  return healthReportOf(context, options.anonymous ? { operational: reusedOperational } : {});
}

/** `complete`: every check answered within the deadline (else `problems` lacks what did not). */
type Operational = { problems: string[]; alertsFiring: number | undefined; complete: boolean };
type OperationalContext = Pick<WebContext, "connections" | "definitions">;
/** The last complete checks made for anonymous probes, and the run under way or last started. */
let lastComplete: Operational | undefined;
let lastStarted: { at: number; checks: Promise<Operational> } | undefined;

/** The last complete checks (only the first probe waits, for its own); started anew when due. */
function reusedOperational(context: OperationalContext): Promise<Operational> {
  const now = performance.now();
  if (!lastStarted || now - lastStarted.at >= ANONYMOUS_CHECKS_REUSED_MS) {
    const checks = operationalChecks(context).then((result) => {
      if (result.complete) lastComplete = result;
      return result;
    });
    lastStarted = { at: now, checks };
  }
  return lastComplete ? Promise.resolve(lastComplete) : lastStarted.checks;
}

/** The same report for a given context (the CLI's `status`); never throws. */
export async function healthReportOf(
  context: Pick<WebContext, "probes" | "connections" | "definitions" | "config">,
  options: { operational?: (context: OperationalContext) => Promise<Operational> } = {},
): Promise<HealthReport> {
  const checked = await checkHealth(context.probes);
  const report = {
    ...checked,
    problems: [...checked.problems, ...triggerReplicaProblems(checked.redis, context.config.triggerReplicas)],
  };
  if (!report.ok) return report;
  const { problems, alertsFiring } = await (options.operational ?? operationalChecks)(context);
  return { ...report, problems: [...report.problems, ...problems], ...(alertsFiring ? { alertsFiring } : {}) };
}

/** Stale claims, missed ticks, changed builds, held-up workers and firing alerts; each bounded by HEALTH_DEADLINE_MS. */
async function operationalChecks({ connections, definitions }: OperationalContext): Promise<Operational> {
  const late = <T>() =>
    new Promise<null>((resolve) => setTimeout(resolve, HEALTH_DEADLINE_MS, null)) as Promise<T | null>;
  const [problems, alertsFiring] = await Promise.all([
    Promise.race([
      Promise.all([
        staleClaimProblems(connections.main, connections.claims, connections.keys),
        missedTickProblems(connections.main, connections.keys, definitions),
        changedBuildProblems(connections.main, connections.keys),
        liveWorkerProblems(connections.main, connections.keys),
      ]).then((lists) => lists.flat()),
      late<string[]>(),
    ]).catch(() => null),
    Promise.race([connections.main.hlen(connections.keys.alertsFiring), late<number>()]).catch(() => null),
  ]);
  return {
    problems: problems ?? [],
    alertsFiring: alertsFiring ?? undefined,
    complete: problems !== null && alertsFiring !== null,
  };
}
