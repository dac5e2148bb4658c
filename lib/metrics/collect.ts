/**
 * `GET /metrics`: Prometheus text format (lib/metrics/exposition), every value read from Redis at scrape
 * time — so every dashboard process serves the same numbers, and counters (kept in Redis by
 * lib/metrics/counters) survive restarts. Names and types follow Prometheus' conventions:
 * base units (`_seconds`), `_total` for counters, labels `rebuild` and `tenant` where they apply.
 *
 * Work per scrape: the main Redis' pipeline, the claims' census pages (CLAIM_CENSUS_PAGE, each
 * claim counted as its page is decoded) and BullMQ's job counts, all at once; O(claims + series).
 */
import type { Queue } from "bullmq";
import type { Redis } from "ioredis";
import { RULE_NAMES } from "../alerts/config";
import { EVALUATOR_CLAIM } from "../alerts/rules";
import type { FiringAlert } from "../alerts/types";
import { readWholeCensus, type CensusClaim } from "../claims/census";
import { claimName } from "../claims/name";
import { tenantsOf, type Definitions } from "../rebuilds/definitions";
import type { RedisKeys } from "../redis/keys";
import { HASH_AS_LINES, queueScript, scriptPipeline, type ScriptingClient } from "../redis/scripts";
import { HEARTBEAT_TTL_MS } from "../workers/heartbeat";
import { DURATION_BUCKETS } from "./counters";
import { EXPOSITION_CONTENT_TYPE, Exposition, labelPair } from "./exposition";

export interface MetricsSources {
  main: Pick<Redis, "pipeline"> & ScriptingClient;
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

/** A rebuild × tenant pair the definitions name: its labels and its claim. */
interface Series {
  labels: string;
  claim: string;
  scheduled: boolean;
}

/** The definitions' series, worked out once per definitions object (not per scrape). */
const seriesCache = new WeakMap<Definitions, Series[]>();

function seriesOf(definitions: Definitions): Series[] {
  let series = seriesCache.get(definitions);
  if (series) return series;
  series = [];
  for (const definition of definitions.rebuilds.values()) {
    for (const tenant of tenantsOf(definition)) {
      series.push({
        labels: `${labelPair("rebuild", definition.name)},${labelPair("tenant", tenant ?? "")}`,
        claim: claimName(definition.claimPath, tenant),
        scheduled: Boolean(definition.schedule),
      });
    }
  }
  seriesCache.set(definitions, series);
  return series;
}

export async function collectMetrics(sources: MetricsSources): Promise<{ contentType: string; body: string }> {
  const { main, claims, keys, definitions } = sources;
  const exposition = new Exposition();
  const gauge = (name: string, help: string) => exposition.family(name, help, "gauge");
  const counter = (name: string, help: string) => exposition.family(name, help, "counter");

  // Which rebuild and tenant a claim belongs to: the definitions say; else its holder. Label
  // sets are formatted once per owner (10 000 claims share a few hundred owners), keyed by
  // "rebuild|tenant" as the counters' fields spell it.
  const ownerLabels = new Map<string, string>();
  const labelsOfSeries = (key: string) => {
    let labels = ownerLabels.get(key);
    if (labels === undefined) {
      const bar = key.indexOf("|");
      const [rebuild, tenant] = bar < 0 ? [key, ""] : [key.slice(0, bar), key.slice(bar + 1)];
      labels = `${labelPair("rebuild", rebuild)},${labelPair("tenant", tenant)}`;
      ownerLabels.set(key, labels);
    }
    return labels;
  };
  const series = seriesOf(definitions);
  const owners = new Map<string, string>();
  for (const s of series) owners.set(s.claim, s.labels);
  const ownerOf = (claim: string, holder?: { rebuild: string | null; tenant: string | null }) =>
    owners.get(claim) ?? labelsOfSeries(`${holder?.rebuild ?? ""}|${holder?.tenant ?? ""}`);

  const active = gauge("claimwatch_claims_active", "Claims held now.");
  const ttl = gauge("claimwatch_claim_ttl_seconds", "Remaining lifetime of each held claim.");
  const stale = gauge(
    "claimwatch_claim_stale",
    "Held claims that look stale, each counted once, under its main reason (holder-not-live: its worker has no heartbeat; else refresh-overdue: no refresh for two intervals).",
  );
  const skips = gauge("claimwatch_consecutive_skips", "Consecutive skips of a claim (reset by a completed rebuild).");
  const reasonLabels = {
    "refresh-overdue": labelPair("reason", "refresh-overdue"),
    "holder-not-live": labelPair("reason", "holder-not-live"),
  } as const;
  for (const s of series) {
    active.set(s.labels, 0);
    skips.set(`${labelPair("claim", s.claim)},${s.labels}`, 0);
    for (const reason of ["refresh-overdue", "holder-not-live"] as const) {
      stale.set(`${s.labels},${reasonLabels[reason]}`, 0);
    }
  }
  let evaluatorLive = 0;
  const countClaim = (claim: CensusClaim) => {
    // The alert evaluator's own claim is not a rebuild's: it has its own gauge below.
    if (claim.name === EVALUATOR_CLAIM) {
      evaluatorLive = 1;
      return;
    }
    const owner = ownerOf(claim.name, claim.holder);
    active.inc(owner);
    ttl.append(`${labelPair("claim", claim.name)},${owner}`, Math.max(0, claim.pttlMs) / 1000);
    // Once per claim (a sum is the number of stale claims): a dead holder explains an overdue refresh.
    const main = claim.stale.find((r) => r.kind === "holder-not-live") ?? claim.stale[0];
    if (main) stale.inc(`${owner},${reasonLabels[main.kind]}`);
  };

  // The claims pages, the job counts and the main Redis' reads all at once: the pages only need
  // the live workers when they are decoded, and each claim is counted as its page arrives.
  const mainPipeline = scriptPipeline(main, [HASH_AS_LINES]).time().zrevrange(keys.workerRegistry, 0, -1, "WITHSCORES");
  const mainRead = queueScript(mainPipeline, HASH_AS_LINES, [keys.metricsCounters], [])
    .hgetall(keys.alertsFiring)
    .exec()
    .then((replies) => {
      const failed = replies?.find(([error]) => error);
      if (!replies || failed || replies.length !== 4) throw failed?.[0] ?? new Error("metrics: no reply from Redis");
      const [seconds, micros] = replies[0]![1] as [string, string];
      const now = Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
      const registry = replies[1]![1] as string[];
      const live = new Set<string>();
      for (let i = 0; i < registry.length; i += 2)
        if (Number(registry[i + 1]) >= now - HEARTBEAT_TTL_MS) live.add(registry[i]!);
      const counterLines = String(replies[2]![1] ?? "");
      return {
        live,
        counters: counterLines === "" ? [] : counterLines.split("\n"),
        firing: replies[3]![1] as Record<string, string>,
      };
    });
  const [{ live, counters, firing }, census, jobCounts] = await Promise.all([
    mainRead,
    readWholeCensus(
      claims,
      keys,
      mainRead.then((read) => read.live),
      countClaim,
    ),
    sources.queue.getJobCounts(...QUEUE_STATES),
  ]);
  for (const [claim, count] of census.skips) skips.set(`${labelPair("claim", claim)},${ownerOf(claim)}`, count);

  const runs = counter("claimwatch_runs_total", "Finished runs (attempts), by status.");
  const lastSuccess = gauge(
    "claimwatch_last_success_timestamp_seconds",
    "Unix time at which the newest rebuilt run finished.",
  );
  const missed = counter(
    "claimwatch_schedule_missed_total",
    "Scheduled ticks that produced no run within the scheduleMissed grace (counted by the alert evaluator).",
  );
  for (const s of series) if (s.scheduled) missed.inc(s.labels, 0);
  const duration = exposition.family(
    "claimwatch_run_duration_seconds",
    "Duration of finished runs (started to finished).",
    "histogram",
  );
  const histograms = new Map<string, { buckets: Map<string, number>; sum: number; count: number }>();
  const histogramOf = (labels: string) => {
    let h = histograms.get(labels);
    if (!h) histograms.set(labels, (h = { buckets: new Map(), sum: 0, count: 0 }));
    return h;
  };
  // Fields are `kind|rebuild|tenant` or `kind|rebuild|tenant|detail` (lib/metrics/counters), read
  // by position: 12 000 fields at 1 000 series, so no split arrays.
  for (let i = 0; i + 1 < counters.length; i += 2) {
    const field = counters[i]!;
    const value = Number(counters[i + 1]);
    if (!Number.isFinite(value)) continue;
    const kindEnd = field.indexOf("|");
    if (kindEnd < 0) continue;
    const kind = field.slice(0, kindEnd);
    const rebuildEnd = field.indexOf("|", kindEnd + 1);
    const tenantEnd = rebuildEnd < 0 ? -1 : field.indexOf("|", rebuildEnd + 1);
    const labels = labelsOfSeries(field.slice(kindEnd + 1, tenantEnd < 0 ? field.length : tenantEnd));
    const detailEnd = tenantEnd < 0 ? -1 : field.indexOf("|", tenantEnd + 1);
    const detail = tenantEnd < 0 ? undefined : field.slice(tenantEnd + 1, detailEnd < 0 ? field.length : detailEnd);
    switch (kind) {
      case "runs":
        runs.inc(`${labels},${labelPair("status", detail ?? "")}`, value);
        break;
      case "lastsuccess":
        lastSuccess.set(labels, value / 1000);
        break;
      case "missed":
        missed.inc(labels, value);
        break;
      case "dur":
        histogramOf(labels).buckets.set(detail ?? "+Inf", value);
        break;
      case "dursum":
        histogramOf(labels).sum = value;
        break;
      case "durcount":
        histogramOf(labels).count = value;
        break;
    }
  }
  // Stored buckets are per bucket; the format wants them cumulative.
  const bounds = [...DURATION_BUCKETS.map(String), "+Inf"].map((bound) => [bound, labelPair("le", bound)] as const);
  for (const [labels, h] of histograms) {
    let cumulative = 0;
    for (const [bound, le] of bounds) {
      cumulative += h.buckets.get(bound) ?? 0;
      duration.append(`${labels},${le}`, cumulative, "_bucket");
    }
    duration.append(labels, h.sum, "_sum");
    duration.append(labels, h.count, "_count");
  }

  const takeovers = counter(
    "claimwatch_takeovers_total",
    "Claims taken over from an earlier attempt whose worker died or stalled.",
  );
  const fencing = counter(
    "claimwatch_fencing_rejections_total",
    "Publishes refused because a newer holder had been granted the claim.",
  );
  for (const s of series) {
    takeovers.inc(s.labels, 0);
    fencing.inc(`${labelPair("claim", s.claim)},${s.labels}`, 0);
  }
  for (const [field, raw] of Object.entries(census.counters)) {
    const bar = field.indexOf("|");
    const kind = field.slice(0, bar);
    const rest = field.slice(bar + 1);
    if (kind === "takeovers") {
      const [rebuild = "", tenant = ""] = rest.split("|");
      takeovers.inc(labelsOfSeries(`${rebuild}|${tenant}`), Number(raw));
    } else if (kind === "fencing") {
      fencing.inc(`${labelPair("claim", rest)},${ownerOf(rest)}`, Number(raw));
    }
  }

  gauge("claimwatch_workers_live", "Workers with a live heartbeat.").set("", live.size);
  gauge(
    "claimwatch_alerts_evaluator_up",
    "1 while some process holds the alert evaluator's claim (0: nobody evaluates claimwatch's own alerts).",
  ).set("", evaluatorLive);
  const alerts = gauge("claimwatch_alerts_firing", "Alerts firing now (claimwatch's own evaluator).");
  const alertLabels = (alertname: string, severity: string) =>
    `${labelPair("alertname", alertname)},${labelPair("severity", severity)}`;
  const configured = definitions.alerts?.rules;
  for (const name of RULE_NAMES) {
    const rule = configured?.[name];
    if (rule) alerts.set(alertLabels(name, rule.severity), 0);
  }
  for (const json of Object.values(firing)) {
    try {
      const alert = JSON.parse(json) as FiringAlert;
      alerts.inc(alertLabels(alert.labels.alertname, alert.labels.severity));
    } catch {
      // a damaged entry: the evaluator resolves it
    }
  }
  const queue = gauge("claimwatch_queue_jobs", "Jobs in the BullMQ rebuild queue, by state.");
  for (const state of QUEUE_STATES) queue.set(labelPair("state", state), Number(jobCounts[state] ?? 0));

  return { contentType: EXPOSITION_CONTENT_TYPE, body: exposition.format() };
}
