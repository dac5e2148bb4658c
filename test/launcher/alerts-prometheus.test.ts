/**
 * Alerts and metrics against the real parts: Debian's Alertmanager and Prometheus on free ports,
 * the real dashboard (`npm run web`, which evaluates alerts too) and real workers that the test
 * pauses and stops. Scaled-down times: evaluation every second, a schedule every 3 seconds.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { acquireClaim, claimName, releaseClaim } from "../../lib/claims";
import { after, before, test } from "node:test";
import {
  createTestBed,
  startWebServer,
  slowStep,
  type TestBed,
  type TestWebServer,
  type TestWorker,
} from "../support/stack";
import {
  activeAlerts,
  promQuery,
  startAlertmanager,
  startPrometheus,
  type AlertmanagerAlert,
  type RunningService,
} from "../support/prometheus";

const METRICS_TOKEN = "metrics-token-for-tests-0123456789";
const VIEWER_TOKEN = "viewer-token-for-tests-0123456789";
const OPERATOR_TOKEN = "operator-token-for-tests-0123456789";

let alertmanager: RunningService;
let bed: TestBed;
let web: TestWebServer;
let worker: TestWorker;

before(async () => {
  alertmanager = await startAlertmanager();
  bed = await createTestBed(
    {
      held: { output: "out/held", claim: { ttl: "30s", refreshEvery: "1s" }, timeLimit: "5m", steps: [slowStep(20)] },
      sched: {
        output: "out/sched",
        schedule: { cron: "*/3 * * * * *", tz: "UTC" },
        steps: [{ name: "s", run: ["true"] }],
      },
    },
    {
      alerts: {
        evaluateEvery: "1s",
        repeatEvery: "2s",
        receivers: [{ alertmanager: { url: alertmanager.url } }],
        rules: {
          claimStale: { for: "1s" },
          skips: { atLeast: 2 },
          scheduleMissed: { grace: "2s" },
          workerMissing: { for: "1s" },
        },
      },
    },
  );
  web = await startWebServer(bed, {
    CLAIMWATCH_METRICS_TOKEN: METRICS_TOKEN,
    CLAIMWATCH_VIEWER_TOKEN: `viewer:${VIEWER_TOKEN}`,
    CLAIMWATCH_OPERATOR_TOKEN: `operator:${OPERATOR_TOKEN}`,
  });
  worker = await bed.startWorker();
});
after(async () => {
  await web?.stop();
  await bed?.close();
});

async function until<T>(label: string, probe: () => Promise<T | undefined | false>, timeoutMs = 90_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const value = await probe();
      if (value) return value;
    } catch (error) {
      last = error;
    }
    if (Date.now() > deadline)
      throw new Error(`not within ${timeoutMs} ms: ${label}${last ? ` (${String(last)})` : ""}`);
    await new Promise((r) => setTimeout(r, 250));
  }
}

const find = (alerts: AlertmanagerAlert[], alertname: string, rebuild?: string) =>
  alerts.find((a) => a.labels.alertname === alertname && (rebuild === undefined || a.labels.rebuild === rebuild));

test("skips ≥ N and a stale claim (worker paused) fire in Alertmanager, and resolve after SIGCONT and the run", async () => {
  const first = await bed.trigger("held", { version: "v1" });
  // Holding the claim (a fence), not only running: a record runs from before the claim is taken,
  // and a duplicate sent then could take the claim first and leave `first` the one that skips.
  await bed.waitForRun((r) => r.jobId === first && r.status === "running" && r.fence !== null, 60_000);
  for (let i = 0; i < 2; i++) {
    const again = await bed.trigger("held", { version: "v1" });
    await bed.waitForRun((r) => r.jobId === again && r.status === "skipped", 60_000, `skip ${i + 1}`);
  }
  const skips = await until("skips alert in Alertmanager", async () =>
    find(await activeAlerts(alertmanager), "skips", "held"),
  );
  assert.equal(skips.labels.severity, "warning");
  assert.match(skips.labels.claim!, /^output:.*out\/held$/);
  assert.match(skips.annotations.link!, /\/rebuilds$/);
  // Re-posted while firing: still active past the endsAt of the first post, with a later endsAt.
  const firstEndsAt = Date.parse(skips.endsAt);
  await new Promise((r) => setTimeout(r, Math.max(0, firstEndsAt - Date.now()) + 1_000));
  const reposted = find(await activeAlerts(alertmanager), "skips", "held");
  assert.ok(reposted, "still active after its first endsAt");
  assert.ok(Date.parse(reposted.endsAt) > firstEndsAt, "endsAt moved on with each re-post");

  process.kill(worker.pid, "SIGSTOP");
  let stale: AlertmanagerAlert;
  try {
    stale = await until("claimStale alert in Alertmanager", async () =>
      find(await activeAlerts(alertmanager), "claimStale", "held"),
    );
  } finally {
    process.kill(worker.pid, "SIGCONT");
  }
  assert.equal(stale.labels.severity, "critical");
  assert.match(stale.annotations.summary!, /held/);
  await until("claimStale resolved after SIGCONT", async () => !find(await activeAlerts(alertmanager), "claimStale"));
  // The run finishes (or its redelivery does): skips reset, the alert resolves.
  await until("skips resolved after the run", async () => !find(await activeAlerts(alertmanager), "skips"), 180_000);
});

test("/metrics: token or viewer only, promtool-clean, scraped by Prometheus and queried with PromQL; test notification", async () => {
  const anonymous = await fetch(`${web.url}/metrics`);
  assert.equal(anonymous.status, 401);
  assert.match(anonymous.headers.get("www-authenticate") ?? "", /Bearer/);
  assert.equal(
    (await fetch(`${web.url}/metrics`, { headers: { authorization: "Bearer wrong-token-0123456789" } })).status,
    401,
  );
  const asViewer = await fetch(`${web.url}/metrics`, { headers: { authorization: `Bearer ${VIEWER_TOKEN}` } });
  assert.equal(asViewer.status, 200);
  // A claim held by a process that is no worker: listed with its TTL, and stale (holder not live).
  const held = claimName(bed.definitions.rebuilds.get("held")!.outputPath);
  // The run before released it right after its final record (a round trip of its own).
  await until(
    "the held claim released by the run before",
    async () => (await bed.claims.exists(bed.keys.claim(held))) === 0,
  );
  const grant = await acquireClaim(
    bed.claims,
    bed.keys,
    held,
    { workerId: "not-a-worker", rebuild: "held" },
    { ttlMs: 60_000, refreshEveryMs: 10_000 },
  );
  assert.equal(grant.status, "acquired");
  const response = await fetch(`${web.url}/metrics`, { headers: { authorization: `Bearer ${METRICS_TOKEN}` } });
  if (grant.status === "acquired") await releaseClaim(bed.claims, bed.keys, held, grant.token);
  assert.equal(response.status, 200);
  assert.match(response.headers.get("content-type") ?? "", /text\/plain; version=0\.0\.4/);
  const text = await response.text();
  for (const name of [
    "claimwatch_claims_active",
    "claimwatch_claim_ttl_seconds",
    "claimwatch_claim_stale",
    "claimwatch_consecutive_skips",
    "claimwatch_runs_total",
    "claimwatch_run_duration_seconds_bucket",
    "claimwatch_last_success_timestamp_seconds",
    "claimwatch_takeovers_total",
    "claimwatch_fencing_rejections_total",
    "claimwatch_schedule_missed_total",
    "claimwatch_workers_live",
    "claimwatch_alerts_firing",
    "claimwatch_queue_jobs",
  ]) {
    assert.match(text, new RegExp(`^${name}[{ ]`, "m"), `${name} is exposed`);
  }
  assert.match(text, /^claimwatch_runs_total\{rebuild="held",tenant="",status="skipped"\} 2$/m);
  assert.match(text, /^claimwatch_claims_active\{rebuild="held",tenant=""\} 1$/m);
  assert.match(text, /^claimwatch_claim_stale\{rebuild="held",tenant="",reason="holder-not-live"\} 1$/m);
  const ttl = Number(
    /^claimwatch_claim_ttl_seconds\{claim="[^"]+",rebuild="held",tenant=""\} ([\d.]+)$/m.exec(text)?.[1],
  );
  assert.ok(ttl > 0 && ttl <= 60, `TTL in seconds (got ${ttl})`);
  assert.match(text, /^claimwatch_run_duration_seconds_count\{rebuild="held",tenant=""\} [1-9]/m);
  assert.match(text, /^claimwatch_alerts_evaluator_up 1$/m);
  const lint = spawnSync("promtool", ["check", "metrics"], { input: text, encoding: "utf8" });
  assert.equal(lint.status, 0, `promtool check metrics: ${lint.stdout}${lint.stderr}`);

  const prometheus = await startPrometheus(web.url, METRICS_TOKEN);
  try {
    const up = await until("Prometheus scraped claimwatch", async () => {
      const result = await promQuery(prometheus, 'up{job="claimwatch"}');
      return result[0]?.value[1] === "1" ? result : undefined;
    });
    assert.equal(up.length, 1);
    const skipped = await until("claimwatch_runs_total in Prometheus", async () => {
      const result = await promQuery(prometheus, 'sum(claimwatch_runs_total{rebuild="held",status="skipped"})');
      return result.length > 0 ? result : undefined;
    });
    assert.equal(skipped[0]!.value[1], "2");
    const rebuilt = await promQuery(prometheus, 'sum(claimwatch_runs_total{rebuild="sched",status="rebuilt"}) > 0');
    assert.equal(rebuilt.length, 1, "scheduled runs are counted");
  } finally {
    await prometheus.stop();
  }

  // A test notification: operators only, audited, delivered to Alertmanager by the evaluator.
  const send = (token: string) =>
    fetch(`${web.url}/api/alerts/test`, {
      method: "POST",
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
      body: JSON.stringify({ receiver: "alertmanager", reason: "checking the pager" }),
    });
  assert.equal((await send(VIEWER_TOKEN)).status, 403);
  const unknown = await fetch(`${web.url}/api/alerts/test`, {
    method: "POST",
    headers: { authorization: `Bearer ${OPERATOR_TOKEN}`, "content-type": "application/json" },
    body: JSON.stringify({ receiver: "pager" }),
  });
  assert.equal(unknown.status, 404);
  assert.match(
    ((await unknown.json()) as { error: { message: string } }).error.message,
    /^receiver: no receiver named "pager" \(configured: alertmanager\)/,
  );
  const queued = await send(OPERATOR_TOKEN);
  assert.equal(queued.status, 202);
  await until("test alert in Alertmanager", async () => find(await activeAlerts(alertmanager), "ClaimwatchTest"));
  const audit = (await (
    await fetch(`${web.url}/api/audit`, { headers: { authorization: `Bearer ${OPERATOR_TOKEN}` } })
  ).json()) as { entries: { action: string; actor: string; result: string; reason: string }[] };
  const entry = audit.entries.find((e) => e.action === "alert-test" && e.result === "done");
  assert.ok(entry, "the test notification is audited");
  assert.equal(entry.reason, "checking the pager");
  const view = (await (
    await fetch(`${web.url}/api/alerts`, { headers: { authorization: `Bearer ${VIEWER_TOKEN}` } })
  ).json()) as { receivers: { name: string; last: { status: string } | null }[] };
  assert.equal(view.receivers[0]!.name, "alertmanager");
  assert.equal(view.receivers[0]!.last?.status, "delivered");
});

test("a scheduled tick without a worker fires scheduleMissed (and workerMissing); a new worker resolves both", async () => {
  await worker.stop("SIGTERM");
  const missed = await until("scheduleMissed in Alertmanager", async () =>
    find(await activeAlerts(alertmanager), "scheduleMissed", "sched"),
  );
  assert.equal(missed.labels.severity, "critical");
  await until("workerMissing in Alertmanager", async () => find(await activeAlerts(alertmanager), "workerMissing"));
  const counted = await fetch(`${web.url}/metrics`, { headers: { authorization: `Bearer ${METRICS_TOKEN}` } }).then(
    (r) => r.text(),
  );
  const missedTotal = Number(
    /^claimwatch_schedule_missed_total\{rebuild="sched",tenant=""\} (\d+)$/m.exec(counted)?.[1],
  );
  assert.ok(missedTotal >= 1, `claimwatch_schedule_missed_total counts the missed tick (got ${missedTotal})`);

  worker = await bed.startWorker();
  await until("scheduleMissed resolved", async () => !find(await activeAlerts(alertmanager), "scheduleMissed"));
  await until("workerMissing resolved", async () => !find(await activeAlerts(alertmanager), "workerMissing"));
});
