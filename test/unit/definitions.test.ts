import assert from "node:assert/strict";
import fs from "node:fs";
import { test } from "node:test";
import { loadDefinitions, parseDefinitions } from "../../lib/rebuilds/definitions";
import { formatDuration, parseDuration } from "../../lib/rebuilds/duration";
import { cappedBackoff, scheduledTickOf } from "../../lib/rebuilds/queue";
import { renderSchema, SCHEMA_FILE } from "../../scripts/generate-schema";

const step = { name: "noop", run: ["true"] };
const base = { output: "out", steps: [step] };

function rejection(rebuilds: Record<string, unknown>, extra: Record<string, unknown> = {}): string {
  const result = parseDefinitions({ rebuilds, ...extra }, "/srv/claimwatch.yaml");
  assert.equal(result.ok, false, "expected a rejection");
  return result.ok ? "" : result.error.message;
}

test("durations: units, compounds, and what is not a duration", () => {
  assert.equal(parseDuration("500ms"), 500);
  assert.equal(parseDuration("90s"), 90_000);
  assert.equal(parseDuration("1h30m"), 5_400_000);
  assert.equal(parseDuration("1d"), 86_400_000);
  for (const bad of ["", "90", "1.5h", "ninety", "0s", "-5s", "5 s", "5S"])
    assert.equal(parseDuration(bad), undefined, bad);
  assert.equal(formatDuration(90_000), "90s");
});

test("the shipped claimwatch.yaml is valid and its defaults are applied", () => {
  const result = loadDefinitions("claimwatch.yaml");
  assert.ok(result.ok, result.ok ? "" : result.error.message);
  const parcels = result.definitions.rebuilds.get("parcels")!;
  assert.equal(parcels.claim.ttl, 90_000);
  assert.equal(parcels.timeLimit, 7_200_000);
  assert.deepEqual(result.definitions.rebuilds.get("incidents")!.tenants, ["acme", "globex"]);
  assert.equal(result.definitions.retention.runs, 10_000);
});

test("each rejection names the path and the problem", () => {
  const cases: [Record<string, unknown>, RegExp][] = [
    [{ p: { ...base, timeLimit: "90s" } }, /^claimwatch\.yaml: rebuilds\.p\.timeLimit: must be longer than claim\.ttl/],
    [
      { p: { ...base, claim: { ttl: "10s", refreshEvery: "6s" } } },
      /rebuilds\.p\.claim\.refreshEvery: must be at most half/,
    ],
    [{ p: { ...base, extra: true } }, /rebuilds\.p: unknown key 'extra'/],
    [{ p: { ...base, claim: { ttl: "soon" } } }, /rebuilds\.p\.claim\.ttl: must be a duration/],
    [{ p: { ...base, timeLimit: "30d" } }, /rebuilds\.p\.timeLimit: must be at most 24d \(a timer limit\)/],
    [{ p: base, q: base }, /rebuilds\.q\.output: is also the output of rebuild 'p'/],
    [{ p: base, q: { ...base, output: "out/inner" } }, /rebuilds\.q\.output: is nested with the output of rebuild 'p'/],
    [{ p: { ...base, schedule: { cron: "0 25 * * *" } } }, /rebuilds\.p\.schedule\.cron: is not a cron expression/],
    [
      { p: { ...base, schedule: { cron: "0 2 * * *", tz: "Mars/Olympus" } } },
      /rebuilds\.p\.schedule\.tz: must be an IANA time zone/,
    ],
    [{ p: { ...base, steps: [{ name: "x", run: [] }] } }, /rebuilds\.p\.steps\[0\]/],
    [{ p: { ...base, steps: [] } }, /rebuilds\.p\.steps: must list at least one step/],
    [{ p: { ...base, tenants: ["a", "a"] } }, /rebuilds\.p\.tenants: lists a tenant twice/],
    [{ p: { ...base, tenants: ["../etc"] } }, /rebuilds\.p\.tenants\[0\]: a tenant name must be/],
    [{ "bad name": base }, /rebuilds\.bad name: invalid name/],
  ];
  for (const [rebuilds, expected] of cases) assert.match(rejection(rebuilds), expected);
  assert.match(rejection({ p: base }, { retention: { runs: 1 } }), /retention\.runs/);
  assert.match(rejection({ p: base }, { unknown: 1 }), /unknown key 'unknown'/);
});

test("a missing file and broken YAML are reported, not thrown", () => {
  const missing = loadDefinitions("/nonexistent/claimwatch.yaml");
  assert.ok(!missing.ok && /file not found/.test(missing.error.message));
  const file = `/tmp/claimwatch-broken-${process.pid}.yaml`;
  fs.writeFileSync(file, "rebuilds:\n  p: [unclosed\n");
  const broken = loadDefinitions(file);
  fs.rmSync(file);
  assert.ok(!broken.ok && /is not valid YAML/.test(broken.error.message), broken.ok ? "" : broken.error.message);
});

test("retry backoff doubles from the configured delay and stops at the cap", () => {
  assert.deepEqual(
    [1, 2, 3, 4, 5, 6].map((n) => cappedBackoff(n, 30_000, 600_000)),
    [30_000, 60_000, 120_000, 240_000, 480_000, 600_000],
  );
});

test("scheduler job ids carry the tick time", () => {
  assert.deepEqual(scheduledTickOf("repeat:sched.parcels:1764468000000"), {
    schedulerId: "sched.parcels",
    tickAt: 1764468000000,
  });
  assert.equal(scheduledTickOf("run-123"), null);
});

test("claimwatch.schema.json is generated from the current schema (npm run schema)", () => {
  assert.equal(fs.readFileSync(SCHEMA_FILE, "utf8"), renderSchema());
});

test("step limits: sizes in binary units, pids, and clear rejections", () => {
  const parsed = parseDefinitions(
    { rebuilds: { p: { ...base, steps: [{ ...step, limits: { memory: "512MiB", pids: 64 } }] } } },
    "/srv/claimwatch.yaml",
  );
  assert.ok(parsed.ok, parsed.ok ? "" : parsed.error.message);
  const runStep = parsed.definitions.rebuilds.get("p")!.steps[0]!;
  assert.ok("run" in runStep);
  assert.deepEqual(runStep.limits, { memory: 512 * 1024 ** 2, pids: 64 });
  for (const [memory, bytes] of [
    ["1G", 1024 ** 3],
    ["64Mi", 64 * 1024 ** 2],
    [8388608, 8388608],
  ] as const) {
    const ok = parseDefinitions({ rebuilds: { p: { ...base, steps: [{ ...step, limits: { memory } }] } } }, "/c.yaml");
    assert.ok(ok.ok && "run" in ok.definitions.rebuilds.get("p")!.steps[0]!);
    assert.equal(
      ok.ok && (ok.definitions.rebuilds.get("p")!.steps[0] as { limits: { memory: number } }).limits.memory,
      bytes,
    );
  }
  assert.match(
    rejection({ p: { ...base, steps: [{ ...step, limits: { memory: "lots" } }] } }),
    /rebuilds\.p\.steps\[0\]\.limits\.memory: must be a size like 512MiB/,
  );
  assert.match(
    rejection({ p: { ...base, steps: [{ ...step, limits: { memory: "1K" } }] } }),
    /limits\.memory: must be at least 4MiB/,
  );
  assert.match(
    rejection({ p: { ...base, steps: [{ ...step, limits: { pids: 2 } }] } }),
    /limits\.pids: must be at least 8/,
  );
  assert.match(rejection({ p: { ...base, steps: [{ ...step, limits: { cpu: 1 } }] } }), /unknown key 'cpu'/);
});

test("the worker's shutdown wait follows the longest killGrace", async () => {
  const { shutdownWaitMs } = await import("../../lib/rebuilds/definitions");
  const parsed = parseDefinitions(
    { rebuilds: { a: { ...base, steps: [{ ...step, killGrace: "20s" }] }, b: { ...base, output: "out2" } } },
    "/srv/claimwatch.yaml",
  );
  assert.ok(parsed.ok);
  assert.ok(shutdownWaitMs(parsed.definitions) > 20_000);
});
