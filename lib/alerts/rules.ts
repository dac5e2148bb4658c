/**
 * The alert rules, as one pure function of a snapshot: which alerts hold now. The evaluator
 * compares the result with what is stored as firing; the difference is the transitions.
 * One owner per rule: the Alerts page, Alertmanager, Slack and webhooks all see these.
 */
import { claimName } from "../claims/name";
import { EVALUATOR_CLAIM } from "./evaluator-claim";
import { describeStale } from "../claims/stale";
import { safetyProblems } from "../health/redis-safety";
import { tenantsOf, type Definitions } from "../rebuilds/definitions";
import { formatDuration } from "../rebuilds/duration";
import { formatAbsolute } from "../time-text";
import { HEARTBEAT_TTL_MS as HEARTBEAT_TTL } from "../workers/heartbeat";
import type { AlertsConfig, RuleName, Severity } from "./config";
import type { AlertSnapshot } from "./snapshot";
import type { ActiveAlert, FiringAlert } from "./types";

/** The claim the evaluating process holds (lib/alerts/evaluator); never alerted on itself. */
export { EVALUATOR_CLAIM };

export interface RuleOutcome {
  active: ActiveAlert[];
  /** Pending times to store (condition began, its `for` not yet over) and to forget. */
  pendingSet: Record<string, number>;
  pendingDel: string[];
  /** Ticks newly counted as missed, per series: `missed|r|t` += n, `missedcursor|r|t` = tick. */
  missed: { series: string; count: number; upTo: number }[];
}

export interface RuleContext {
  definitions: Definitions;
  /** The alerts firing before this evaluation (by id): a runFailed alert outlives its run's record. */
  firing?: ReadonlyMap<string, FiringAlert>;
  /** Origin of the dashboard for links (CLAIMWATCH_PUBLIC_URL, else http://HOST:PORT). */
  publicOrigin: string;
}

export function evaluateRules(snapshot: AlertSnapshot, config: AlertsConfig, context: RuleContext): RuleOutcome {
  const { rules } = config;
  const { now } = snapshot;
  const active: ActiveAlert[] = [];
  const pendingSet: Record<string, number> = {};
  const pendingDel: string[] = [];
  const link = (page: string) => `${context.publicOrigin}${page}`;
  const owners = claimOwners(context.definitions);
  const push = ({
    rule,
    severity,
    subject,
    labels,
    summary,
    description,
    page,
    since,
  }: {
    rule: RuleName;
    severity: Severity;
    /** What the alert is about within its rule ("" for a rule with one subject): its id is rule|subject. */
    subject: string;
    labels: {
      rebuild?: string | null;
      tenant?: string | null;
      claim?: string;
      [extra: string]: string | null | undefined;
    };
    summary: string;
    description: string;
    /** The dashboard page the alert links to. */
    page: string;
    /** When the condition began (null: unknown). */
    since: number | null;
  }) => {
    const extra: Record<string, string> = {};
    for (const [key, value] of Object.entries(labels)) extra[key] = value ?? "";
    active.push({
      id: subject ? `${rule}|${subject}` : rule,
      labels: {
        ...extra,
        alertname: rule,
        severity,
        rebuild: labels.rebuild ?? "",
        tenant: labels.tenant ?? "",
        claim: labels.claim ?? "",
        service: "claimwatch",
      },
      annotations: { summary, description, link: link(page) },
      since,
    });
  };
  const label = (rebuild: string | null | undefined, tenant: string | null | undefined, fallback = "") =>
    rebuild ? `${rebuild}${tenant ? `/${tenant}` : ""}` : fallback;

  if (rules.claimStale) {
    for (const claim of snapshot.census.claims) {
      if (claim.name === EVALUATOR_CLAIM || claim.staleSince === null) continue;
      const staleFor = snapshot.census.serverTime - claim.staleSince;
      if (staleFor < rules.claimStale.for) continue;
      const owner = owners.get(claim.name);
      const rebuild = claim.holder.rebuild ?? owner?.rebuild;
      const tenant = claim.holder.tenant ?? owner?.tenant;
      push({
        rule: "claimStale",
        severity: rules.claimStale.severity,
        subject: claim.name,
        labels: { rebuild, tenant, claim: claim.name },
        summary: `Claim ${label(rebuild, tenant, claim.name)} stale for ${roughDuration(staleFor)}`,
        description: `${describeStale(claim.stale)}; holder ${claim.holder.workerId ?? "?"} on ${claim.holder.host ?? "?"} (pid ${claim.holder.pid ?? "?"}), fence ${claim.holder.fence ?? "?"}. ${nextStep(claim, snapshot.census.serverTime)}`,
        page: "/claims",
        since: claim.staleSince,
      });
    }
  }

  if (rules.skips) {
    for (const [name, count] of snapshot.census.skips) {
      if (name === EVALUATOR_CLAIM || count < rules.skips.atLeast) continue;
      const owner = owners.get(name);
      push({
        rule: "skips",
        severity: rules.skips.severity,
        subject: name,
        labels: { rebuild: owner?.rebuild, tenant: owner?.tenant, claim: name },
        summary: `${label(owner?.rebuild, owner?.tenant, name)} skipped ${count} times in a row`,
        description: `Each run found the claim held for the same version. Either a run takes very long or the claim is stale.`,
        page: "/rebuilds",
        since: null,
      });
    }
  }

  if (rules.runFailed) {
    for (const series of snapshot.series) {
      const failed = series.newestFailed;
      const subject = `${series.rebuild}|${series.tenant ?? ""}`;
      if (!failed) {
        // Its failed run trimmed by retention (black-box helper-181: the alert resolved with nothing
        // rebuilt): it fires on, as it was, until a later run leaves the output up to date.
        // A run that left it up to date started after the failed one ended, at most about two
        // evaluations before the alert fired (review helper-184: a rebuild begun just before).
        const kept = context.firing?.get(`runFailed|${subject}`);
        const failedBy = kept ? kept.startsAt - 2 * config.evaluateEvery - 5_000 : 0;
        if (kept && !(series.newestUpToDateAt !== null && series.newestUpToDateAt > failedBy)) {
          active.push({ id: kept.id, labels: kept.labels, annotations: kept.annotations, since: kept.startsAt });
        }
        continue;
      }
      // Resolved by a later run that left the output up to date (rebuilt, or skipped as already rebuilt).
      if (series.newestUpToDateAt !== null && series.newestUpToDateAt > failed.createdAt) continue;
      const attempts = context.definitions.rebuilds.get(series.rebuild)?.retries.attempts ?? 1;
      // A transient failure with attempts left is retried by the queue: not (yet) an alert.
      if (failed.reason.startsWith("transient:") && failed.attempt < attempts) continue;
      push({
        rule: "runFailed",
        severity: rules.runFailed.severity,
        subject,
        labels: { rebuild: series.rebuild, tenant: series.tenant, claim: claimOf(context.definitions, series) },
        summary: runFailedSummary(label(series.rebuild, series.tenant), failed, attempts),
        description: failed.reason || "failed",
        page: `/runs/${encodeURIComponent(failed.id)}`,
        since: null,
      });
    }
  }

  if (rules.runLong) {
    // One alert per rebuild and tenant (the documented labels), about its longest run: the next
    // attempt of a job (a takeover) keeps the alert rather than resolving it and firing another.
    const long = new Map<
      string,
      { run: (typeof snapshot.running)[number]; startedAt: number; over: number; count: number }
    >();
    for (const run of snapshot.running) {
      const override = context.definitions.rebuilds.get(run.rebuild)?.alerts?.runLong;
      if (override === false) continue;
      const over = override?.over ?? rules.runLong.over;
      const startedAt = run.startedAt ?? run.createdAt;
      if (now - startedAt <= over) continue;
      const key = `${run.rebuild}|${run.tenant ?? ""}`;
      const seen = long.get(key);
      if (!seen) long.set(key, { run, startedAt, over, count: 1 });
      else {
        seen.count += 1;
        if (startedAt < seen.startedAt) Object.assign(seen, { run, startedAt });
      }
    }
    for (const [subject, { run, startedAt, over, count }] of long) {
      push({
        rule: "runLong",
        severity: rules.runLong.severity,
        subject,
        labels: { rebuild: run.rebuild, tenant: run.tenant, claim: claimOf(context.definitions, run) },
        summary: `Run of ${label(run.rebuild, run.tenant)} running for over ${formatDuration(over)}`,
        description:
          `Run ${run.id} started ${formatAbsolute(startedAt, "utc")}.` +
          (count > 1 ? ` ${count - 1} more of its runs are over ${formatDuration(over)} too.` : ""),
        page: `/runs/${encodeURIComponent(run.id)}`,
        since: startedAt + over,
      });
    }
  }

  const missed: RuleOutcome["missed"] = [];
  if (rules.scheduleMissed) {
    for (const series of snapshot.series) {
      if (series.unservedTicks.length === 0) continue;
      const newest = series.unservedTicks[series.unservedTicks.length - 1]!;
      const fresh = series.unservedTicks.filter((tick) => tick > series.missedCountedUpTo);
      if (fresh.length > 0) {
        missed.push({ series: `${series.rebuild}|${series.tenant ?? ""}`, count: fresh.length, upTo: newest });
      }
      push({
        rule: "scheduleMissed",
        severity: rules.scheduleMissed.severity,
        subject: `${series.rebuild}|${series.tenant ?? ""}`,
        labels: { rebuild: series.rebuild, tenant: series.tenant, claim: claimOf(context.definitions, series) },
        summary: `Scheduled run of ${label(series.rebuild, series.tenant)} at ${formatAbsolute(newest, "utc")} did not start`,
        description: `${series.unservedTicks.length} scheduled tick(s) produced no run within ${formatDuration(rules.scheduleMissed.grace)}. Is a worker running and the queue moving?`,
        page: "/rebuilds",
        since: newest + rules.scheduleMissed.grace,
      });
    }
  }

  if (rules.takeover) {
    for (const event of snapshot.takeovers) {
      if (event.claim === EVALUATOR_CLAIM) continue;
      push({
        rule: "takeover",
        severity: rules.takeover.severity,
        subject: event.id,
        labels: { rebuild: event.rebuild, tenant: event.tenant, claim: event.claim },
        summary: `Claim ${label(event.rebuild, event.tenant, event.claim)} taken over from a dead holder`,
        description: `Fence ${event.previousFence || "?"} → ${event.fence}: an earlier attempt of the job died or stalled and its redelivery took the claim over.`,
        page: "/claims",
        since: event.at,
      });
    }
  }

  if (rules.workerMissing) {
    const id = "workerMissing";
    if (snapshot.workersLive === 0) {
      // Since the newest heartbeat went stale; without any, since this condition was first seen.
      const since = snapshot.newestBeat !== null ? snapshot.newestBeat + HEARTBEAT_TTL : (snapshot.pending[id] ?? now);
      if (snapshot.newestBeat === null && snapshot.pending[id] === undefined) pendingSet[id] = now;
      if (now - since >= rules.workerMissing.for) {
        push({
          rule: "workerMissing",
          severity: rules.workerMissing.severity,
          subject: "",
          labels: {},
          summary: "No claimwatch worker is running",
          description: "No worker heartbeat: rebuilds wait in the queue and schedules do not run.",
          page: "/workers",
          since,
        });
      }
    } else if (snapshot.pending[id] !== undefined) {
      pendingDel.push(id);
    }
  }

  if (rules.redisUnsafe) {
    for (const [server, safety, title] of [
      ["main", snapshot.redis.main, "Redis"],
      ["claims", snapshot.redis.claims, "Claims Redis"],
    ] as const) {
      // Unreachable is not this rule's: the evaluation itself fails then, and says so.
      if (!safety.ok) continue;
      const problems = safetyProblems(title, safety);
      if (problems.length === 0) continue;
      push({
        rule: "redisUnsafe",
        severity: rules.redisUnsafe.severity,
        subject: server,
        labels: { redis: server },
        summary: `${title} is unsafe for claims`,
        description: problems.join("; "),
        page: "/claims",
        since: null,
      });
    }
  }
  return { active, pendingSet, pendingDel, missed };
}

/** Claim name → owner, per definitions object (they do not change once parsed). */
const ownersByDefinitions = new WeakMap<Definitions, Map<string, { rebuild: string; tenant: string | undefined }>>();

function claimOwners(definitions: Definitions): Map<string, { rebuild: string; tenant: string | undefined }> {
  const known = ownersByDefinitions.get(definitions);
  if (known) return known;
  const owners = new Map<string, { rebuild: string; tenant: string | undefined }>();
  ownersByDefinitions.set(definitions, owners);
  for (const definition of definitions.rebuilds.values()) {
    for (const tenant of tenantsOf(definition)) {
      owners.set(claimName(definition.claimPath, tenant), { rebuild: definition.name, tenant });
    }
  }
  return owners;
}

/** "rebuild|tenant" → claim name, per definitions object. */
const claimsByDefinitions = new WeakMap<Definitions, Map<string, string>>();

function claimOf(definitions: Definitions, series: { rebuild: string; tenant: string | null }): string {
  let claims = claimsByDefinitions.get(definitions);
  if (!claims) claimsByDefinitions.set(definitions, (claims = new Map()));
  const key = `${series.rebuild}|${series.tenant ?? ""}`;
  let claim = claims.get(key);
  if (claim === undefined) {
    const definition = definitions.rebuilds.get(series.rebuild);
    claim = definition ? claimName(definition.claimPath, series.tenant ?? undefined) : "";
    claims.set(key, claim);
  }
  return claim;
}

/** A failed run's alert summary: a transient failure alerts only on its last attempt; any other is not retried. */
export function runFailedSummary(
  rebuild: string,
  failed: { attempt: number; reason: string },
  attempts: number,
): string {
  return failed.reason.startsWith("transient:")
    ? `Rebuild ${rebuild} failed on its last attempt (${failed.attempt} of ${attempts})`
    : `Rebuild ${rebuild} failed (attempt ${failed.attempt}; not retried: a permanent failure)`;
}

/** `45 s`, `12 min`, `3 h 5 min`: how long, for a summary. */
export function roughDuration(ms: number): string {
  const seconds = Math.max(0, Math.floor(ms / 1_000));
  if (seconds < 60) return `${seconds} s`;
  const minutes = Math.floor(seconds / 60);
  if (minutes < 60) return `${minutes} min`;
  return `${Math.floor(minutes / 60)} h${minutes % 60 ? ` ${minutes % 60} min` : ""}`;
}

/**
 * What a stale claim's alert asks of the operator: a force release, or, once one was made,
 * nothing but to wait for the holder to stop (the claim ends then, or when it expires).
 */
function nextStep(claim: { pttlMs: number; holder: { revokedAt: number | null } }, serverTime: number): string {
  if (claim.holder.revokedAt === null) return "Consider a force release.";
  return `Force-released ${roughDuration(serverTime - claim.holder.revokedAt)} ago: the claim ends when its holder stops, at the latest when it expires in ${roughDuration(claim.pttlMs)}; releasing it again changes nothing.`;
}
