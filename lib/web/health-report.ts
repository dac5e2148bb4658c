import { describeError } from "../describe-error";
import { checkHealth, HEALTH_DEADLINE_MS, unconfiguredHealth, type HealthReport } from "../health/health";
import { triggerReplicaProblems } from "../health/redis-safety";
import { missedTickProblems, staleClaimProblems, liveWorkerProblems } from "../health/operations";
import { changedBuildProblems } from "../rebuilds/build-integrity";
import { getWebContext, type WebContext } from "./context";

/**
 * The web server's health report, with the operational checks (stale claims, missed ticks) unless
 * `operational: false` (anonymous probes: cheap, and they would only see a count); never throws.
 */
export async function currentHealth(options: { operational?: boolean } = {}): Promise<HealthReport> {
  let context;
  try {
    context = getWebContext();
  } catch (error) {
    return unconfiguredHealth(describeError(error));
  }
  return healthReportOf(context, options);
}

/** The same report for a given context (the CLI's `status`); never throws. */
export async function healthReportOf(
  context: Pick<WebContext, "probes" | "connections" | "definitions" | "config">,
  options: { operational?: boolean } = {},
): Promise<HealthReport> {
  const checked = await checkHealth(context.probes);
  const report = {
    ...checked,
    problems: [...checked.problems, ...triggerReplicaProblems(checked.redis, context.config.triggerReplicas)],
  };
  if (!report.ok || options.operational === false) return report;
  const { connections, definitions } = context;
  const operational = await Promise.race([
    Promise.all([
      staleClaimProblems(connections.main, connections.claims, connections.keys),
      missedTickProblems(connections.main, connections.keys, definitions),
      changedBuildProblems(connections.main, connections.keys),
      liveWorkerProblems(connections.main, connections.keys),
    ]).then((lists) => lists.flat()),
    new Promise<string[]>((resolve) => setTimeout(resolve, HEALTH_DEADLINE_MS, [])),
  ]).catch(() => []);
  const alertsFiring = await Promise.race([
    connections.main.hlen(connections.keys.alertsFiring),
    new Promise<undefined>((resolve) => setTimeout(resolve, HEALTH_DEADLINE_MS, undefined)),
  ]).catch(() => undefined);
  return { ...report, problems: [...report.problems, ...operational], ...(alertsFiring ? { alertsFiring } : {}) };
}
