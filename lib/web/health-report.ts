import { describeError } from "../describe-error";
import { checkHealth, HEALTH_DEADLINE_MS, unconfiguredHealth, type HealthReport } from "../health/health";
import { triggerReplicaProblems } from "../health/redis-safety";
import { missedTickProblems, staleClaimProblems, liveWorkerProblems } from "../health/operations";
import { tickingSchedules } from "../rebuilds/schedules";
import { changedBuildProblems } from "../rebuilds/build-integrity";
import { currentLagProblems } from "../rebuilds/current-lag";
import { serverNow } from "../redis/time";
import { getWebContext, type WebContext } from "./context";

/** How often an anonymous probe starts the operational checks anew (load balancers probe often). */
export const ANONYMOUS_CHECKS_REUSED_MS = 5_000;
/**
 * The oldest complete checks an anonymous probe is answered with: past it (the checks have kept
 * timing out, e.g. a slow Redis) a probe waits for the run under way, whose report says what did
 * not answer, instead of a count from minutes ago.
 */
export const ANONYMOUS_CHECKS_MAX_AGE_MS = 60_000;

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

/** `complete`: every check answered within the deadline (else `problems` says what did not). */
export type Operational = { problems: string[]; alertsFiring: number | undefined; complete: boolean };
type OperationalContext = Pick<WebContext, "connections" | "definitions" | "queue">;

/**
 * `check` reused for anonymous probes: its last complete result while younger than
 * ANONYMOUS_CHECKS_MAX_AGE_MS, started anew at most every ANONYMOUS_CHECKS_REUSED_MS in the
 * background; only the first probe (or one after the last complete result aged out) waits, for
 * the run under way. `clock` in ms (a test's own).
 */
export function reusedChecks<C>(
  check: (context: C) => Promise<Operational>,
  clock: () => number = () => performance.now(),
): (context: C) => Promise<Operational> {
  let lastComplete: { at: number; result: Operational } | undefined;
  let lastStarted: { at: number; checks: Promise<Operational> } | undefined;
  return (context) => {
    const now = clock();
    if (!lastStarted || now - lastStarted.at >= ANONYMOUS_CHECKS_REUSED_MS) {
      const checks = check(context).then((result) => {
        if (result.complete) lastComplete = { at: now, result };
        return result;
      });
      lastStarted = { at: now, checks };
    }
    return lastComplete && now - lastComplete.at < ANONYMOUS_CHECKS_MAX_AGE_MS
      ? Promise.resolve(lastComplete.result)
      : lastStarted.checks;
  };
}

const reusedOperational = reusedChecks(operationalChecks);

/** The same report for a given context (the CLI's `status`); never throws. */
export async function healthReportOf(
  context: Pick<WebContext, "probes" | "connections" | "definitions" | "config" | "queue">,
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

/** The banner's line while this server's definitions are not the ones the workers set the schedules up with. */
export const definitionsDifferProblem = (file: string) =>
  `This dashboard server's definitions (${file}) are not the ones the workers set the schedules up with (the file was edited, or a deploy is under way): schedules are shown as the workers run them; start this server again once the file is final`;

const OPERATIONAL_CHECKS =
  "the checks for stale claims, missed ticks, changed builds, outputs whose current lags and held-up workers";
export const OPERATIONAL_CHECKS_LATE = `${OPERATIONAL_CHECKS} did not answer within ${HEALTH_DEADLINE_MS / 1000} s (is the main Redis slow?)`;

/** Stale claims, missed ticks, changed builds, lagging outputs, held-up workers and firing alerts; each bounded by HEALTH_DEADLINE_MS. */
function operationalChecks({ connections, definitions, queue }: OperationalContext): Promise<Operational> {
  return answeredWithin(
    Promise.all([
      staleClaimProblems(connections.main, connections.claims, connections.keys),
      // The schedules as the workers set them up: a file edited here since this server read it is not what ticks.
      tickingSchedules(queue, connections.main, connections.keys, definitions).then(
        async ({ schedules, definitionsDiffer }) => [
          ...(definitionsDiffer ? [definitionsDifferProblem(definitions.file)] : []),
          ...(await missedTickProblems(connections.main, connections.keys, definitions, { schedules })),
        ],
      ),
      changedBuildProblems(connections.main, connections.keys),
      serverNow(connections.claims).then((now) => currentLagProblems(connections.claims, connections.keys, now)),
      liveWorkerProblems(connections.main, connections.keys),
    ]).then((lists) => lists.flat()),
    connections.main.hlen(connections.keys.alertsFiring),
    HEALTH_DEADLINE_MS,
  );
}

/** The checks' problems and the firing alerts' count as far as they answered within `deadlineMs`. */
export async function answeredWithin(
  problems: Promise<string[]>,
  alertsFiring: Promise<number>,
  deadlineMs: number,
): Promise<Operational> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<"late">((resolve) => (timer = setTimeout(resolve, deadlineMs, "late")));
  const [answered, firing] = await Promise.all([
    Promise.race([problems, late]).catch((error: unknown) => ({ failed: describeError(error) })),
    Promise.race([alertsFiring, late]).catch(() => "late" as const),
  ]);
  clearTimeout(timer);
  return {
    // Checks that did not answer are a problem, not a clean bill.
    problems:
      answered === "late"
        ? [OPERATIONAL_CHECKS_LATE]
        : "failed" in answered
          ? [`${OPERATIONAL_CHECKS} failed: ${answered.failed}`]
          : answered,
    alertsFiring: typeof firing === "number" ? firing : undefined,
    complete: Array.isArray(answered) && typeof firing === "number",
  };
}
