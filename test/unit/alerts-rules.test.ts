/** The `alerts:` section (clear errors, defaults) and the rules as a pure function of a snapshot. */
import assert from "node:assert/strict";
import { test } from "node:test";
import { receiverEnvWarnings, receiversOf, RULE_NAMES } from "../../lib/alerts/config";
import { planChanges } from "../../lib/alerts/commit";
import { backoffMs, BACKOFF_CAP_MS } from "../../lib/alerts/outbox";
import { alertmanagerAlert, signBody, slackMessage, webhookBody } from "../../lib/alerts/receivers";
import { EVALUATOR_CLAIM, evaluateRules, runFailedSummary } from "../../lib/alerts/rules";
import type { AlertSnapshot } from "../../lib/alerts/snapshot";
import type { Delivery } from "../../lib/alerts/types";
import type { ClaimHolder } from "../../lib/claims/types";
import { claimName } from "../../lib/claims/name";
import { parseDefinitions, type Definitions } from "../../lib/rebuilds/definitions";

const rebuilds = {
  parcels: { output: "/srv/out/parcels", schedule: { cron: "0 2 * * *" }, steps: [{ name: "s", run: ["true"] }] },
  tiles: {
    output: "/srv/out/tiles",
    tenants: ["acme"],
    retries: { attempts: 3 },
    alerts: { runLong: { over: "10m" } },
    steps: [{ name: "s", run: ["true"] }],
  },
};

function load(alerts: unknown): Definitions {
  const result = parseDefinitions({ rebuilds, alerts }, "/srv/claimwatch.yaml");
  assert.ok(result.ok, result.ok ? "" : result.error.message);
  return result.definitions;
}

function refusal(alerts: unknown): string {
  const result = parseDefinitions({ rebuilds, alerts }, "/srv/claimwatch.yaml");
  assert.equal(result.ok, false);
  return result.ok ? "" : result.error.message;
}

test("alerts config: defaults on, each rule tunable or off, receivers named", () => {
  const defaults = load({}).alerts!;
  assert.equal(defaults.rules.claimStale && defaults.rules.claimStale.for, 300_000);
  assert.equal(defaults.rules.skips && defaults.rules.skips.atLeast, 3);
  assert.equal(defaults.rules.scheduleMissed && defaults.rules.scheduleMissed.grace, 600_000);
  assert.equal(defaults.rules.workerMissing && defaults.rules.workerMissing.for, 60_000);
  assert.equal(defaults.rules.runLong && defaults.rules.runLong.over, 7_200_000);
  assert.equal(defaults.evaluateEvery, 15_000);
  const tuned = load({
    rules: { claimStale: { for: "10m" }, skips: false },
    receivers: [
      { alertmanager: { url: "http://am:9093" } },
      { slack: { webhookUrlEnv: "SLACK_WEBHOOK_URL" } },
      { webhook: { url: "https://ops.example.com/hook", secretEnv: "HOOK_SECRET" } },
      { webhook: { url: "https://b.example.com/hook", secretEnv: "HOOK_SECRET" } },
    ],
  }).alerts!;
  assert.equal(tuned.rules.claimStale && tuned.rules.claimStale.for, 600_000);
  assert.equal(tuned.rules.skips, false);
  assert.deepEqual(
    receiversOf(tuned).map((r) => r.name),
    ["alertmanager", "slack", "webhook-1", "webhook-2"],
  );
  assert.equal(parseDefinitions({ rebuilds }, "/srv/claimwatch.yaml").ok && load(undefined).alerts, undefined);
});

test("alerts config: each refusal is one line naming the path and the problem", () => {
  const cases: [unknown, RegExp][] = [
    [{ rules: { claimStale: { for: "5 minutes" } } }, /alerts\.rules\.claimStale\.for: must be a duration/],
    [{ rules: { skips: { atLeast: 0 } } }, /alerts\.rules\.skips\.atLeast: /],
    [{ rules: { runLong: true } }, /alerts\.rules\.runLong: must be false \(the rule is off\) or a mapping/],
    [{ rules: { stale: {} } }, /alerts\.rules: unknown key 'stale'/],
    [{ receivers: [{ pagerduty: { key: "x" } }] }, /alerts\.receivers\[0\]: a receiver is exactly one of/],
    [
      { receivers: [{ alertmanager: { url: "ftp://am" } }] },
      /alerts\.receivers\[0\]\.alertmanager\.url: must be an http\(s\) URL/,
    ],
    [
      { receivers: [{ webhook: { url: "http://x", secretEnv: "1X" } }] },
      /secretEnv: must be an environment variable name/,
    ],
    [
      { receivers: [{ alertmanager: { url: "http://x", name: "a" } }, { slack: { webhookUrlEnv: "S", name: "a" } }] },
      /alerts\.receivers\[1\]: two receivers are named 'a'/,
    ],
    [{ evaluateEvery: "100ms" }, /alerts\.evaluateEvery: must be at least 1s/],
    // A duration, but zero: said as such, not "must be a duration" (README-truth helper-128).
    [{ evaluateEvery: "0s" }, /alerts\.evaluateEvery: must be longer than 0 \(e\.g\. 1s\)/],
    [{ rules: { claimStale: { for: "0m" } } }, /alerts\.rules\.claimStale\.for: must be longer than 0/],
    [{ severity: "high" }, /alerts: unknown key 'severity'/],
  ];
  for (const [alerts, expected] of cases) {
    const message = refusal(alerts);
    assert.match(message, /^claimwatch\.yaml: /);
    assert.match(message, expected);
    assert.ok(!message.includes("\n"));
  }
});

test("alerts config: a rule given as a mapping is judged as a mapping; its bad setting is named", () => {
  for (const rule of RULE_NAMES) {
    const message = refusal({ rules: { [rule]: { severity: "page" } } });
    assert.equal(message, `claimwatch.yaml: alerts.rules.${rule}.severity: must be one of critical, warning, info`);
  }
  const cases: [unknown, string][] = [
    [{ rules: { skips: { atLeast: "three" } } }, "alerts.rules.skips.atLeast: "],
    [{ rules: { claimStale: { for: 5 } } }, "alerts.rules.claimStale.for: "],
    [{ rules: { takeover: { resolveAfter: null, severity: "info" } } }, "alerts.rules.takeover.resolveAfter: "],
    [{ rules: { runLong: { over: [], colour: "red" } } }, "alerts.rules.runLong.over: "],
    [{ receivers: [{ webhook: { url: "http://x" } }] }, "alerts.receivers[0].webhook.secretEnv: is required"],
    [{ receivers: [{ slack: {} }] }, "alerts.receivers[0].slack.webhookUrlEnv: is required"],
    [{ receivers: [{ alertmanager: { url: 9093 } }] }, "alerts.receivers[0].alertmanager.url: "],
  ];
  for (const [alerts, where] of cases) {
    const message = refusal(alerts);
    assert.ok(message.startsWith(`claimwatch.yaml: ${where}`), message);
    assert.doesNotMatch(message, /must be false \(the rule is off\)|a receiver is exactly one of/);
  }
  // Both problems of one rule mapping are reported, each at its own path.
  assert.deepEqual(refusal({ rules: { skips: { atLeast: "x", severity: "loud" } } }).split("\n"), [
    "claimwatch.yaml: alerts.rules.skips.atLeast: must be a number, not a string",
    "claimwatch.yaml: alerts.rules.skips.severity: must be one of critical, warning, info",
  ]);
  // Per rebuild: rebuilds.<name>.alerts.runLong.
  const perRebuild = parseDefinitions(
    { rebuilds: { ...rebuilds, tiles: { ...rebuilds.tiles, alerts: { runLong: {} } } } },
    "/srv/claimwatch.yaml",
  );
  assert.ok(!perRebuild.ok);
  assert.equal(perRebuild.error.message, "claimwatch.yaml: rebuilds.tiles.alerts.runLong.over: is required (a string)");
  // Not a mapping, or a receiver of two kinds (or none): the union's own words still apply.
  assert.match(refusal({ rules: { runFailed: "yes" } }), /alerts\.rules\.runFailed: must be false \(the rule is off\)/);
  assert.match(
    refusal({ receivers: [{ slack: { webhookUrlEnv: "S" }, webhook: { url: "http://x", secretEnv: "X" } }] }),
    /alerts\.receivers\[0\]: a receiver is exactly one of/,
  );
  // A misspelt setting of a receiver of a known kind (a short ending left off): one problem, named.
  assert.deepEqual(refusal({ receivers: [{ slack: { webhookUrl: "https://hooks" } }] }).split("\n"), [
    "claimwatch.yaml: alerts.receivers[0].slack: unknown key 'webhookUrl' (did you mean 'webhookUrlEnv'?)",
  ]);
  // A misspelt optional key (it has a default, so nothing is missing): named from what the mapping may have.
  assert.equal(
    refusal({ rules: { claimStale: { fro: "5m" } } }),
    "claimwatch.yaml: alerts.rules.claimStale: unknown key 'fro' (did you mean 'for'?)",
  );
  assert.equal(
    refusal({ evaluateEvry: "1s" }),
    "claimwatch.yaml: alerts: unknown key 'evaluateEvry' (did you mean 'evaluateEvery'?)",
  );
  assert.equal(
    refusal({ rules: { claimStal: {} } }),
    "claimwatch.yaml: alerts.rules: unknown key 'claimStal' (did you mean 'claimStale'?)",
  );
  // A key the mapping already has is not suggested again; an unrelated one gets no suggestion.
  assert.equal(
    refusal({ rules: { skips: { atLeast: 2, atleast: 3 } } }),
    "claimwatch.yaml: alerts.rules.skips: unknown key 'atleast'",
  );
  // An unrelated unknown key beside a missing one: both.
  assert.deepEqual(refusal({ receivers: [{ slack: { colour: "red" } }] }).split("\n"), [
    "claimwatch.yaml: alerts.receivers[0].slack.webhookUrlEnv: is required (a string)",
    "claimwatch.yaml: alerts.receivers[0].slack: unknown key 'colour'",
  ]);
});

test("alerts config: a receiver whose secret variable is unset in this process is named in one warning line", () => {
  const alerts = load({
    receivers: [
      { alertmanager: { url: "http://am:9093" } },
      { slack: { webhookUrlEnv: "SLACK_WEBHOOK_URL" } },
      { webhook: { url: "https://ops.example.com/hook", secretEnv: "HOOK_SECRET", name: "ops" } },
    ],
  }).alerts!;
  assert.deepEqual(
    receiverEnvWarnings(alerts, { SLACK_WEBHOOK_URL: "https://hooks.slack.com/x", HOOK_SECRET: "s" }),
    [],
  );
  assert.deepEqual(receiverEnvWarnings(alerts, { SLACK_WEBHOOK_URL: "", HOOK_SECRET: undefined }), [
    "alerts: receiver 'slack': SLACK_WEBHOOK_URL (webhookUrlEnv) is not set in this process's environment; its deliveries fail (nothing is sent) while this process evaluates",
    "alerts: receiver 'ops': HOOK_SECRET (secretEnv) is not set in this process's environment; its deliveries fail (nothing is sent unsigned) while this process evaluates",
  ]);
  // Set but no URL (a typo in the scheme): said at start, without the value (it is the secret).
  assert.deepEqual(receiverEnvWarnings(alerts, { SLACK_WEBHOOK_URL: "https//hooks.slack.com/x", HOOK_SECRET: "s" }), [
    "alerts: receiver 'slack': SLACK_WEBHOOK_URL (webhookUrlEnv) is not an http(s) URL; its deliveries fail (nothing is sent) while this process evaluates",
  ]);
});

const holder = (over: Partial<ClaimHolder>): ClaimHolder => ({
  host: "h",
  pid: 1,
  workerId: "w1",
  jobId: "j",
  attempt: null,
  runId: "r",
  rebuild: "parcels",
  tenant: null,
  version: "v",
  fence: 3,
  ttlMs: 90_000,
  refreshEveryMs: 30_000,
  acquiredAt: 0,
  refreshedAt: 0,
  stopWithinMs: null,
  revokedBy: null,
  revokedAt: null,
  ...over,
});

function snapshot(over: Partial<AlertSnapshot> = {}): AlertSnapshot {
  const now = 10_000_000;
  return {
    now,
    census: { serverTime: now, claims: [], skips: new Map(), counters: {} },
    workersLive: 1,
    newestBeat: now,
    running: [],
    series: [],
    redis: {
      main: {
        ok: true,
        version: "7",
        evictionPolicy: "noeviction",
        persistence: "aof",
        durability: { level: "durable", detail: "appendfsync always", replicasInSync: 0 },
      },
      claims: {
        ok: true,
        version: "7",
        evictionPolicy: "noeviction",
        persistence: "aof",
        durability: { level: "durable", detail: "appendfsync always", replicasInSync: 0 },
      },
    },
    takeovers: [],
    pending: {},
    ...over,
  };
}

test("rules: stale for long enough, skips at the threshold, failed for good, long runs, missing workers, unsafe Redis", () => {
  const definitions = load({ rules: { claimStale: { for: "5m" }, skips: { atLeast: 3 }, runLong: { over: "1h" } } });
  const context = { definitions, publicOrigin: "https://claims.example.com" };
  const now = 10_000_000;
  const parcels = claimName("/srv/out/parcels");
  const acme = claimName("/srv/out/tiles", "acme");
  const outcome = evaluateRules(
    snapshot({
      census: {
        serverTime: now,
        claims: [
          // stale since now - 6 min: fires; stale since now - 1 min: not yet
          {
            name: parcels,
            pttlMs: 1,
            holder: holder({}),
            stale: [{ kind: "refresh-overdue", sinceRefreshMs: 1, refreshEveryMs: 1 }],
            staleSince: now - 360_000,
          },
          {
            name: acme,
            pttlMs: 1,
            holder: holder({ rebuild: "tiles", tenant: "acme" }),
            stale: [{ kind: "holder-not-live", workerId: "w1" }],
            staleSince: now - 60_000,
          },
          {
            name: EVALUATOR_CLAIM,
            pttlMs: 1,
            holder: holder({ rebuild: null }),
            stale: [{ kind: "holder-not-live", workerId: "x" }],
            staleSince: 0,
          },
        ],
        skips: new Map([
          [parcels, 3],
          [acme, 2],
        ]),
        counters: {},
      },
      series: [
        {
          rebuild: "parcels",
          tenant: null,
          newestRunAt: 5,
          newestUpToDateAt: 1,
          newestFailed: { id: "p-a4", createdAt: 5, attempt: 4, reason: "transient: EIO" },
          unservedTicks: [],
          missedCountedUpTo: 0,
        },
        {
          rebuild: "tiles",
          tenant: "acme",
          newestRunAt: 5,
          newestUpToDateAt: 1,
          newestFailed: { id: "t-a1", createdAt: 5, attempt: 1, reason: "transient: EIO" },
          unservedTicks: [now - 700_000],
          missedCountedUpTo: 0,
        },
      ],
      running: [
        { id: "long-a1", rebuild: "parcels", tenant: null, startedAt: now - 3_700_000, createdAt: 0 },
        // The next attempt of the same job (a takeover), still running too: one alert, the longest.
        { id: "long-a2", rebuild: "parcels", tenant: null, startedAt: now - 3_650_000, createdAt: 0 },
        { id: "tiles-a1", rebuild: "tiles", tenant: "acme", startedAt: now - 700_000, createdAt: 0 },
      ],
      workersLive: 0,
      newestBeat: now - 100_000,
      redis: {
        main: {
          ok: true,
          version: "7",
          evictionPolicy: "allkeys-lru",
          persistence: "aof",
          durability: { level: "durable", detail: "appendfsync always", replicasInSync: 0 },
        },
        claims: {
          ok: true,
          version: "7",
          evictionPolicy: "noeviction",
          persistence: "aof",
          durability: { level: "durable", detail: "appendfsync always", replicasInSync: 0 },
        },
      },
    }),
    definitions.alerts!,
    context,
  );
  const ids = outcome.active.map((a) => a.id).sort();
  assert.deepEqual(ids, [
    `claimStale|${parcels}`,
    "redisUnsafe|main",
    "runFailed|parcels|", // transient but attempt 4 of 4: failed for good
    "runLong|parcels|",
    "runLong|tiles|acme", // tiles overrides runLong.over to 10m
    "scheduleMissed|tiles|acme",
    `skips|${parcels}`,
    "workerMissing",
  ]);
  const long = outcome.active.find((a) => a.id === "runLong|parcels|")!;
  assert.deepEqual(Object.keys(long.labels).sort(), ["alertname", "claim", "rebuild", "service", "severity", "tenant"]);
  assert.match(long.annotations.description, /^Run long-a1 started .* 1 more of its runs are over 1h too\.$/);
  assert.equal(long.annotations.link, "https://claims.example.com/runs/long-a1");
  const stale = outcome.active.find((a) => a.labels.alertname === "claimStale")!;
  assert.match(stale.annotations.summary, /stale for 6 min$/);
  assert.deepEqual(
    {
      rebuild: stale.labels.rebuild,
      tenant: stale.labels.tenant,
      claim: stale.labels.claim,
      severity: stale.labels.severity,
    },
    { rebuild: "parcels", tenant: "", claim: parcels, severity: "critical" },
  );
  assert.equal(stale.annotations.link, "https://claims.example.com/claims");
  assert.equal(
    outcome.active.find((a) => a.id === "runFailed|parcels|")!.annotations.link,
    "https://claims.example.com/runs/p-a4",
  );
  assert.equal(
    outcome.active.find((a) => a.id === "runFailed|parcels|")!.annotations.summary,
    "Rebuild parcels failed on its last attempt (4 of 4)",
  );
  assert.deepEqual(outcome.missed, [{ series: "tiles|acme", count: 1, upTo: now - 700_000 }]);
});

test("rules: a rule set to false never fires; workerMissing waits for `for` from when it was first seen", () => {
  const definitions = load({ rules: { workerMissing: { for: "1m" }, redisUnsafe: false } });
  const context = { definitions, publicOrigin: "http://127.0.0.1:3000" };
  const first = evaluateRules(snapshot({ workersLive: 0, newestBeat: null }), definitions.alerts!, context);
  assert.deepEqual(first.active, []);
  assert.deepEqual(Object.keys(first.pendingSet), ["workerMissing"]);
  const later = evaluateRules(
    snapshot({ workersLive: 0, newestBeat: null, pending: { workerMissing: 10_000_000 - 60_000 } }),
    definitions.alerts!,
    context,
  );
  assert.deepEqual(
    later.active.map((a) => a.id),
    ["workerMissing"],
  );
  const back = evaluateRules(snapshot({ pending: { workerMissing: 1 } }), definitions.alerts!, context);
  assert.deepEqual(back.pendingDel, ["workerMissing"]);
});

test("transitions: new alerts fire once, gone ones resolve once, one delivery per receiver each", () => {
  const definitions = load({
    receivers: [{ alertmanager: { url: "http://am:9093" } }, { slack: { webhookUrlEnv: "S" } }],
  });
  const receivers = receiversOf(definitions.alerts!);
  const alert = (id: string) => ({
    id,
    labels: {
      alertname: "skips" as const,
      severity: "warning" as const,
      rebuild: "",
      tenant: "",
      claim: "",
      service: "claimwatch" as const,
    },
    annotations: { summary: id, description: "", link: "" },
    since: null,
  });
  const state = {
    version: 4,
    firing: new Map([
      ["old", { ...alert("old"), startsAt: 1 }],
      ["kept", { ...alert("kept"), startsAt: 1 }],
    ]),
  };
  const changes = planChanges(
    state,
    { active: [alert("kept"), alert("new")], pendingSet: {}, pendingDel: [], missed: [] },
    {},
    receivers,
    50,
  );
  assert.deepEqual(
    changes.fire.map((a) => a.id),
    ["new"],
  );
  assert.deepEqual(changes.resolve, ["old"]);
  assert.deepEqual(
    changes.transitions.map((t) => `${t.status}:${t.alert.id}`),
    ["firing:new", "resolved:old"],
  );
  assert.equal(changes.deliveries.length, 4);
  assert.equal(new Set(changes.deliveries.map((d) => d.id)).size, 4);
  const unchanged = planChanges(
    { version: 5, firing: new Map([["kept", { ...alert("kept"), startsAt: 1 }]]) },
    { active: [alert("kept")], pendingSet: {}, pendingDel: [], missed: [] },
    {},
    receivers,
    60,
  );
  assert.equal(unchanged.transitions.length, 0);
});

test("receiver formats: Alertmanager v2 shape, Slack text, signed webhook body; capped backoff", () => {
  const firing = {
    id: "skips|x",
    labels: {
      alertname: "skips" as const,
      severity: "warning" as const,
      rebuild: "r",
      tenant: "",
      claim: "x",
      service: "claimwatch" as const,
    },
    annotations: { summary: "r skipped 3 times", description: "d", link: "http://h/rebuilds" },
    startsAt: Date.UTC(2026, 0, 1),
  };
  const am = alertmanagerAlert(firing, Date.UTC(2026, 0, 1, 0, 4));
  assert.deepEqual(am.labels, {
    alertname: "skips",
    severity: "warning",
    rebuild: "r",
    claim: "x",
    service: "claimwatch",
  });
  assert.equal(am.startsAt, "2026-01-01T00:00:00.000Z");
  assert.equal(am.endsAt, "2026-01-01T00:04:00.000Z");
  assert.equal(am.generatorURL, "http://h/rebuilds");
  const transition = { id: "t1", status: "resolved" as const, alert: firing, at: 5, endsAt: 5 };
  assert.match(slackMessage(transition).text, /^:white_check_mark: \*RESOLVED\* \[warning\] skips: r skipped 3 times/);
  const delivery: Delivery = {
    id: "t1.hook",
    receiver: "hook",
    transition,
    attempts: 0,
    nextAt: 0,
    createdAt: 0,
    lastError: null,
  };
  const body = webhookBody(delivery);
  assert.equal(JSON.parse(body).deliveryId, "t1.hook");
  assert.equal(body, webhookBody({ ...delivery, attempts: 3, lastError: "HTTP 500" }), "a retry sends the same bytes");
  assert.match(signBody(body, "secret"), /^sha256=[0-9a-f]{64}$/);
  assert.notEqual(signBody(body, "secret"), signBody(body, "other"));
  assert.equal(backoffMs(1), 1_000);
  assert.equal(backoffMs(2), 2_000);
  assert.equal(backoffMs(40), BACKOFF_CAP_MS);
});

test("rules: the skips alert of an output reached through a symlink names its rebuild (claims are named by the real path)", async () => {
  const fs = await import("node:fs");
  const os = await import("node:os");
  const path = await import("node:path");
  const real = fs.mkdtempSync(path.join(os.tmpdir(), "claimwatch-real-"));
  const linked = `${real}-link`;
  fs.symlinkSync(real, linked);
  try {
    const parsed = parseDefinitions(
      { rebuilds: { maps: { output: path.join(linked, "maps"), steps: [{ name: "s", run: ["true"] }] } }, alerts: {} },
      "/srv/claimwatch.yaml",
    );
    assert.ok(parsed.ok);
    const definitions = parsed.definitions;
    const held = claimName(definitions.rebuilds.get("maps")!.claimPath); // the name run-rebuild claims
    const now = 10_000_000;
    const outcome = evaluateRules(
      snapshot({ census: { serverTime: now, claims: [], skips: new Map([[held, 5]]), counters: {} } }),
      definitions.alerts!,
      { definitions, publicOrigin: "http://127.0.0.1:3000" },
    );
    const skips = outcome.active.find((a) => a.labels.alertname === "skips");
    assert.deepEqual([skips?.labels.rebuild, skips?.labels.tenant, skips?.labels.claim], ["maps", "", held]);
  } finally {
    fs.rmSync(linked, { force: true });
    fs.rmSync(real, { recursive: true, force: true });
  }
});

test("runFailed's summary says whether the failure is retried: a transient one on its last attempt, a permanent one never", () => {
  assert.equal(
    runFailedSummary("parcels", { attempt: 4, reason: "transient: EIO" }, 4),
    "Rebuild parcels failed on its last attempt (4 of 4)",
  );
  assert.equal(
    runFailedSummary("tiles/acme", { attempt: 1, reason: "step pack exited with code 3" }, 2),
    "Rebuild tiles/acme failed (attempt 1; not retried: a permanent failure)",
  );
});

test("summaries say how long in the unit that fits: seconds, minutes, hours and minutes", async () => {
  const { roughDuration } = await import("../../lib/alerts/rules");
  assert.deepEqual([15_000, 59_999, 60_000, 3_599_000, 3_600_000, 11_100_000].map(roughDuration), [
    "15 s",
    "59 s",
    "1 min",
    "59 min",
    "1 h",
    "3 h 5 min",
  ]);
});

test("rules: a stale claim already force-released asks for no second release", () => {
  const definitions = load({ rules: { claimStale: { for: "5m" } } });
  const context = { definitions, publicOrigin: "https://claims.example.com" };
  const now = 10_000_000;
  const name = claimName("/srv/out/parcels");
  const stale = [{ kind: "holder-not-live" as const, workerId: "w1" }];
  const alertFor = (revokedAt: number | null) =>
    evaluateRules(
      snapshot({
        census: {
          serverTime: now,
          claims: [{ name, pttlMs: 240_000, holder: holder({ revokedAt }), stale, staleSince: now - 600_000 }],
          skips: new Map(),
          counters: {},
        },
      }),
      definitions.alerts!,
      context,
    ).active.find((a) => a.labels.alertname === "claimStale")!;
  assert.match(alertFor(null).annotations.description, /Consider a force release\.$/);
  const released = alertFor(now - 90_000).annotations.description;
  assert.doesNotMatch(released, /Consider a force release/);
  assert.match(
    released,
    /Force-released 1 min ago: the claim ends when its holder stops, at the latest when it expires in 4 min/,
  );
});
