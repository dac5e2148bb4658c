/**
 * `GET /metrics`: Prometheus text format (prom-client), every value read from Redis at scrape
 * time — so every dashboard process serves the same numbers, and counters (kept in Redis by
 * lib/metrics/counters) survive restarts. Names and types follow Prometheus' conventions:
 * base units (`_seconds`), `_total` for counters, labels `rebuild` and `tenant` where they apply.
 *
 * Work per scrape: three pipelines and BullMQ's job counts; O(claims + series).
 */
import type { Queue } from "bullmq";
import type { Redis } from "ioredis";
import { Counter, Gauge, Registry, type MetricObjectWithValues, type MetricValue } from "prom-client";
import { RULE_NAMES } from "../alerts/config";
import { EVALUATOR_CLAIM } from "../alerts/rules";
import type { FiringAlert } from "../alerts/types";
import { readClaimCensus } from "../claims/census";
import { claimName } from "../claims/name";
import { tenantsOf, type Definitions } from "../rebuilds/definitions";
import type { RedisKeys } from "../redis/keys";
import type { ScriptingClient } from "../redis/scripts";
import { HEARTBEAT_TTL_MS } from "../workers/heartbeat";
import { DURATION_BUCKETS } from "./counters";

export interface MetricsSources {
  main: Pick<Redis, "pipeline">;
  claims: Pick<Redis, "pipeline"> & ScriptingClient;
  keys: RedisKeys;
  definitions: Definitions;
  queue: Pick<Queue, "getJobCounts">;
}

export const QUEUE_STATES = [
  "waiting",
  "active",
  "delayed",
  "prioritized",
  "waiting-children",
  "completed",
  "failed",
] as const;

type Labels = Record<string, string>;

export async function collectMetrics(sources: MetricsSources): Promise<{ contentType: string; body: string }> {
  const { main, claims, keys, definitions } = sources;
  const mainReplies =
    (await main
      .pipeline()
      .time()
      .zrevrange(keys.workerRegistry, 0, -1, "WITHSCORES")
      .hgetall(keys.metricsCounters)
      .hgetall(keys.alertsFiring)
      .exec()) ?? [];
  const failed = mainReplies.find(([error]) => error);
  if (failed || mainReplies.length !== 4) throw failed?.[0] ?? new Error("metrics: no reply from Redis");
  const [seconds, micros] = mainReplies[0]![1] as [string, string];
  const now = Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
  const registry = mainReplies[1]![1] as string[];
  const live = new Set<string>();
  for (let i = 0; i < registry.length; i += 2)
    if (Number(registry[i + 1]) >= now - HEARTBEAT_TTL_MS) live.add(registry[i]!);
  const counters = mainReplies[2]![1] as Record<string, string>;
  const firing = mainReplies[3]![1] as Record<string, string>;
  const [census, jobCounts] = await Promise.all([
    readClaimCensus(claims, keys, live),
    sources.queue.getJobCounts(...QUEUE_STATES),
  ]);

  const reg = new Registry();
  const gauge = (name: string, help: string, labelNames: string[] = []) =>
    new Gauge({ name, help, labelNames, registers: [reg] });
  const counter = (name: string, help: string, labelNames: string[]) =>
    new Counter({ name, help, labelNames, registers: [reg] });

  // Which rebuild and tenant a claim belongs to: its holder says; else the definitions.
  const owners = new Map<string, { rebuild: string; tenant: string }>();
  const series: { rebuild: string; tenant: string; claim: string; scheduled: boolean }[] = [];
  for (const definition of definitions.rebuilds.values()) {
    for (const tenant of tenantsOf(definition)) {
      const claim = claimName(definition.outputPath, tenant);
      owners.set(claim, { rebuild: definition.name, tenant: tenant ?? "" });
      series.push({ rebuild: definition.name, tenant: tenant ?? "", claim, scheduled: Boolean(definition.schedule) });
    }
  }
  const ownerOf = (claim: string, holder?: { rebuild: string | null; tenant: string | null }) => {
    const known = owners.get(claim);
    return {
      rebuild: known?.rebuild ?? holder?.rebuild ?? "",
      tenant: known?.tenant ?? holder?.tenant ?? "",
    };
  };

  const active = gauge("claimwatch_claims_active", "Claims held now.", ["rebuild", "tenant"]);
  const ttl = gauge("claimwatch_claim_ttl_seconds", "Remaining lifetime of each held claim.", [
    "claim",
    "rebuild",
    "tenant",
  ]);
  const stale = gauge(
    "claimwatch_claim_stale",
    "Held claims that look stale, by reason (refresh-overdue: no refresh for two intervals; holder-not-live: holder worker has no heartbeat).",
    ["rebuild", "tenant", "reason"],
  );
  const skips = gauge("claimwatch_consecutive_skips", "Consecutive skips of a claim (reset by a completed rebuild).", [
    "claim",
    "rebuild",
    "tenant",
  ]);
  for (const s of series) {
    active.set(pick(s), 0);
    skips.set({ claim: s.claim, ...pick(s) }, 0);
    for (const reason of ["refresh-overdue", "holder-not-live"]) stale.set({ ...pick(s), reason }, 0);
  }
  let evaluatorLive = 0;
  for (const claim of census.claims) {
    // The alert evaluator's own claim is not a rebuild's: it has its own gauge below.
    if (claim.name === EVALUATOR_CLAIM) {
      evaluatorLive = 1;
      continue;
    }
    const owner = ownerOf(claim.name, claim.holder);
    active.inc(owner);
    ttl.set({ claim: claim.name, ...owner }, Math.max(0, claim.pttlMs) / 1000);
    for (const reason of claim.stale) stale.inc({ ...owner, reason: reason.kind });
  }
  for (const [claim, count] of census.skips) skips.set({ claim, ...ownerOf(claim) }, count);

  const runs = counter("claimwatch_runs_total", "Finished runs (attempts), by status.", [
    "rebuild",
    "tenant",
    "status",
  ]);
  const lastSuccess = gauge(
    "claimwatch_last_success_timestamp_seconds",
    "Unix time at which the newest rebuilt run finished.",
    ["rebuild", "tenant"],
  );
  const missed = counter(
    "claimwatch_schedule_missed_total",
    "Scheduled ticks that produced no run within the scheduleMissed grace (counted by the alert evaluator).",
    ["rebuild", "tenant"],
  );
  for (const s of series) if (s.scheduled) missed.inc(pick(s), 0);
  const histograms = new Map<string, { buckets: Map<string, number>; sum: number; count: number }>();
  const histogramOf = (key: string) => {
    let h = histograms.get(key);
    if (!h) histograms.set(key, (h = { buckets: new Map(), sum: 0, count: 0 }));
    return h;
  };
  for (const [field, raw] of Object.entries(counters)) {
    const parts = field.split("|");
    const value = Number(raw);
    if (!Number.isFinite(value)) continue;
    const [kind, rebuild = "", tenant = ""] = parts;
    switch (kind) {
      case "runs":
        runs.inc({ rebuild, tenant, status: parts[3] ?? "" }, value);
        break;
      case "lastsuccess":
        lastSuccess.set({ rebuild, tenant }, value / 1000);
        break;
      case "missed":
        missed.inc({ rebuild, tenant }, value);
        break;
      case "dur":
        histogramOf(`${rebuild}|${tenant}`).buckets.set(parts[3] ?? "+Inf", value);
        break;
      case "dursum":
        histogramOf(`${rebuild}|${tenant}`).sum = value;
        break;
      case "durcount":
        histogramOf(`${rebuild}|${tenant}`).count = value;
        break;
    }
  }
  reg.registerMetric(storedHistogram(histograms) as never);

  const takeovers = counter(
    "claimwatch_takeovers_total",
    "Claims taken over from an earlier attempt whose worker died or stalled.",
    ["rebuild", "tenant"],
  );
  const fencing = counter(
    "claimwatch_fencing_rejections_total",
    "Publishes refused because a newer holder had been granted the claim.",
    ["claim", "rebuild", "tenant"],
  );
  for (const s of series) {
    takeovers.inc(pick(s), 0);
    fencing.inc({ claim: s.claim, ...pick(s) }, 0);
  }
  for (const [field, raw] of Object.entries(census.counters)) {
    const bar = field.indexOf("|");
    const kind = field.slice(0, bar);
    const rest = field.slice(bar + 1);
    if (kind === "takeovers") {
      const [rebuild = "", tenant = ""] = rest.split("|");
      takeovers.inc({ rebuild, tenant }, Number(raw));
    } else if (kind === "fencing") {
      fencing.inc({ claim: rest, ...ownerOf(rest) }, Number(raw));
    }
  }

  gauge("claimwatch_workers_live", "Workers with a live heartbeat.").set(live.size);
  gauge(
    "claimwatch_alerts_evaluator_up",
    "1 while some process holds the alert evaluator's claim (0: nobody evaluates claimwatch's own alerts).",
  ).set(evaluatorLive);
  const alerts = gauge("claimwatch_alerts_firing", "Alerts firing now (claimwatch's own evaluator).", [
    "alertname",
    "severity",
  ]);
  const configured = definitions.alerts?.rules;
  for (const name of RULE_NAMES) {
    const rule = configured?.[name];
    if (rule) alerts.set({ alertname: name, severity: rule.severity }, 0);
  }
  for (const json of Object.values(firing)) {
    try {
      const alert = JSON.parse(json) as FiringAlert;
      alerts.inc({ alertname: alert.labels.alertname, severity: alert.labels.severity });
    } catch {
      // a damaged entry: the evaluator resolves it
    }
  }
  const queue = gauge("claimwatch_queue_jobs", "Jobs in the BullMQ rebuild queue, by state.", ["state"]);
  for (const state of QUEUE_STATES) queue.set({ state }, Number(jobCounts[state] ?? 0));

  return { contentType: reg.contentType, body: await reg.metrics() };
}

function pick(s: { rebuild: string; tenant: string }): Labels {
  return { rebuild: s.rebuild, tenant: s.tenant };
}

/**
 * A histogram whose buckets are stored in Redis: prom-client's Histogram can only observe, so this
 * hands the registry the same shape (`get()`) with the stored counts made cumulative.
 */
function storedHistogram(histograms: Map<string, { buckets: Map<string, number>; sum: number; count: number }>) {
  const name = "claimwatch_run_duration_seconds";
  return {
    name,
    help: "Duration of finished runs (started to finished).",
    type: "histogram",
    aggregator: "sum",
    async get(): Promise<Omit<MetricObjectWithValues<MetricValue<string>>, "collect">> {
      const values: MetricValue<string>[] = [];
      for (const [key, h] of histograms) {
        const [rebuild = "", tenant = ""] = key.split("|");
        let cumulative = 0;
        for (const bound of [...DURATION_BUCKETS.map(String), "+Inf"]) {
          cumulative += h.buckets.get(bound) ?? 0;
          values.push({
            metricName: `${name}_bucket`,
            labels: { rebuild, tenant, le: bound },
            value: cumulative,
          } as MetricValue<string>);
        }
        values.push({ metricName: `${name}_sum`, labels: { rebuild, tenant }, value: h.sum } as MetricValue<string>);
        values.push({
          metricName: `${name}_count`,
          labels: { rebuild, tenant },
          value: h.count,
        } as MetricValue<string>);
      }
      return { name, help: this.help, type: "histogram" as never, values, aggregator: "sum" };
    },
  };
}
