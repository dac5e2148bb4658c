import { describeError } from "../describe-error";
import { checkHealth, HEALTH_DEADLINE_MS, unconfiguredHealth, type HealthReport } from "../health/health";
import { triggerReplicaProblems } from "../health/redis-safety";
import { missedTickProblems, staleClaimProblems, liveWorkerProblems } from "../health/operations";
import { changedBuildProblems } from "../rebuilds/build-integrity";
import { getWebContext, type WebContext } from "./context";

/** How long an anonymous probe's operational checks are reused (load balancers probe often). */
export const ANONYMOUS_CHECKS_REUSED_MS = 5_000;

/**
 * The web server's health report, never throws. Logged-in callers get the operational checks
 * (stale claims, missed ticks, changed builds, workers) made now; anonymous probes get them as
 * made for a probe at most ANONYMOUS_CHECKS_REUSED_MS ago (they see only their count; this keeps
 * a probe cheap however often it comes).
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

type Operational = { problems: string[]; alertsFiring: number | undefined };
type OperationalContext = Pick<WebContext, "connections" | "definitions">;
let lastOperational: { at: number; checks: Promise<Operational> } | undefined;

/** The last probe's operational checks while they are recent (or still under way), else new ones. */
function reusedOperational(context: OperationalContext): Promise<Operational> {
  const now = performance.now();
  if (!lastOperational || now - lastOperational.at >= ANONYMOUS_CHECKS_REUSED_MS) {
    lastOperational = { at: now, checks: operationalChecks(context) };
  }
  return lastOperational.checks;
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
  const [problems, alertsFiring] = await Promise.all([
    Promise.race([
      Promise.all([
        staleClaimProblems(connections.main, connections.claims, connections.keys),
        missedTickProblems(connections.main, connections.keys, definitions),
        changedBuildProblems(connections.main, connections.keys),
        liveWorkerProblems(connections.main, connections.keys),
      ]).then((lists) => lists.flat()),
      new Promise<string[]>((resolve) => setTimeout(resolve, HEALTH_DEADLINE_MS, [])),
    ]).catch(() => []),
    Promise.race([
      connections.main.hlen(connections.keys.alertsFiring),
      new Promise<undefined>((resolve) => setTimeout(resolve, HEALTH_DEADLINE_MS, undefined)),
    ]).catch(() => undefined),
  ]);
  return { problems, alertsFiring };
}
