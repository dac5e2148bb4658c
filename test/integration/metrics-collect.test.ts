/**
 * `collectMetrics` against a real redis-server, without HTTP (the launcher's alerts-prometheus test
 * scrapes the same text through Prometheus): the counters hash read as one string (HASH_AS_LINES),
 * histograms cumulative with every bucket, a held claim's TTL, stale and skip gauges, and series
 * initialised to 0.
 */
import assert from "node:assert/strict";
import path from "node:path";
import { after, test } from "node:test";
import { acquireClaim, claimName } from "../../lib/claims/index";
import { collectMetrics } from "../../lib/metrics/collect";
import { DURATION_BUCKETS } from "../../lib/metrics/counters";
import { parseDefinitions } from "../../lib/rebuilds/definitions";
import { createRedis } from "../../lib/redis/client";
import { redisKeys } from "../../lib/redis/keys";
import { HASH_AS_LINES, runScript } from "../../lib/redis/scripts";
import { startTestRedis, uniquePrefix } from "../support/redis";

const server = await startTestRedis();
const client = createRedis(server.url, "worker");
after(() => client.disconnect());

const queue = { getJobCounts: async () => ({ waiting: 3, failed: 1 }) };

test("HASH_AS_LINES: a hash as alternate field and value lines; '' when missing", async () => {
  const keys = redisKeys(uniquePrefix("lines"));
  assert.equal(await runScript(client, HASH_AS_LINES, [keys.metricsCounters], []), "");
  await client.hset(keys.metricsCounters, "runs|a|t|rebuilt", "3", "dursum|a|t", "1.5");
  const lines = String(await runScript(client, HASH_AS_LINES, [keys.metricsCounters], [])).split("\n");
  const pairs = new Map<string, string>();
  for (let i = 0; i < lines.length; i += 2) pairs.set(lines[i]!, lines[i + 1]!);
  assert.deepEqual(
    pairs,
    new Map([
      ["runs|a|t|rebuilt", "3"],
      ["dursum|a|t", "1.5"],
    ]),
  );
});

test("collectMetrics: counters, cumulative histogram, claim TTL, stale and skips, zero-initialised series", async () => {
  const keys = redisKeys(uniquePrefix("collect"));
  const parsed = parseDefinitions(
    {
      rebuilds: {
        tiles: {
          output: "/srv/m/tiles",
          tenants: ["acme"],
          schedule: { cron: "0 * * * *" },
          steps: [{ name: "s", run: ["true"] }],
        },
        docs: { output: "/srv/m/docs", steps: [{ name: "s", run: ["true"] }] },
      },
      alerts: {},
    },
    path.join("/tmp", "claimwatch.yaml"),
  );
  if (!parsed.ok) throw parsed.error;
  const definitions = parsed.definitions;
  await client.hset(
    keys.metricsCounters,
    "runs|tiles|acme|rebuilt",
    "4",
    "runs|tiles|acme|failed",
    "1",
    "dur|tiles|acme|5",
    "2",
    "dur|tiles|acme|300",
    "1",
    "dur|tiles|acme|+Inf",
    "1",
    "dursum|tiles|acme",
    "99999.5",
    "durcount|tiles|acme",
    "4",
    "lastsuccess|tiles|acme",
    "1700000000000",
    "missed|tiles|acme",
    "2",
    "missedcursor|tiles|acme",
    "1699999999000",
  );
  const tiles = claimName("/srv/m/tiles", "acme");
  const grant = await acquireClaim(
    client,
    keys,
    tiles,
    { workerId: "gone", rebuild: "tiles", tenant: "acme" },
    {
      ttlMs: 60_000,
      refreshEveryMs: 50,
    },
  );
  assert.equal(grant.status, "acquired");
  await client.hset(keys.claimSkips, tiles, "3");
  // Stale for both reasons (no heartbeat of "gone", no refresh for two intervals): counted once.
  await new Promise((r) => setTimeout(r, 300));

  const { body, contentType } = await collectMetrics({ main: client, claims: client, keys, definitions, queue });
  assert.match(contentType, /^text\/plain; version=0\.0\.4/);
  const lines = body.split("\n");
  const has = (line: string) => assert.ok(lines.includes(line), `missing: ${line}`);
  const series = 'rebuild="tiles",tenant="acme"';
  has(`claimwatch_runs_total{${series},status="rebuilt"} 4`);
  has(`claimwatch_runs_total{${series},status="failed"} 1`);
  has(`claimwatch_last_success_timestamp_seconds{${series}} 1700000000`);
  has(`claimwatch_schedule_missed_total{${series}} 2`);
  has('claimwatch_takeovers_total{rebuild="docs",tenant=""} 0');
  assert.ok(!body.includes('claimwatch_schedule_missed_total{rebuild="docs"'), "docs has no schedule");
  const buckets = lines.filter((line) => line.startsWith(`claimwatch_run_duration_seconds_bucket{${series},`));
  assert.equal(buckets.length, DURATION_BUCKETS.length + 1, "every bucket, +Inf included");
  has(`claimwatch_run_duration_seconds_bucket{${series},le="1"} 0`);
  has(`claimwatch_run_duration_seconds_bucket{${series},le="5"} 2`);
  has(`claimwatch_run_duration_seconds_bucket{${series},le="300"} 3`);
  has(`claimwatch_run_duration_seconds_bucket{${series},le="43200"} 3`);
  has(`claimwatch_run_duration_seconds_bucket{${series},le="+Inf"} 4`);
  has(`claimwatch_run_duration_seconds_sum{${series}} 99999.5`);
  has(`claimwatch_run_duration_seconds_count{${series}} 4`);
  assert.ok(!body.includes("missedcursor"), "cursor fields are the evaluator's, not metrics");
  has(`claimwatch_claims_active{${series}} 1`);
  has(`claimwatch_claims_active{rebuild="docs",tenant=""} 0`);
  const ttl = lines.find((line) => line.startsWith(`claimwatch_claim_ttl_seconds{claim="${tiles}",${series}} `));
  assert.ok(ttl, "the held claim's TTL");
  const seconds = Number(ttl.split(" ")[1]);
  assert.ok(seconds > 50 && seconds <= 60, `TTL ${seconds}`);
  has(`claimwatch_claim_stale{${series},reason="holder-not-live"} 1`);
  has(`claimwatch_claim_stale{${series},reason="refresh-overdue"} 0`);
  has(`claimwatch_consecutive_skips{claim="${tiles}",${series}} 3`);
  has(`claimwatch_queue_jobs{state="waiting"} 3`);
  has("claimwatch_workers_live 0");
  // Families in order, each once, the histogram's lines together.
  const types = lines.filter((line) => line.startsWith("# TYPE ")).map((line) => line.split(" ")[2]);
  assert.equal(new Set(types).size, types.length);
  assert.deepEqual(types.slice(0, 4), [
    "claimwatch_claims_active",
    "claimwatch_claim_ttl_seconds",
    "claimwatch_claim_stale",
    "claimwatch_consecutive_skips",
  ]);
});

test("an output reached through a symlink: its skips and claim series carry the claim the workers hold (the real path), with its rebuild and tenant", async () => {
  const fs = await import("node:fs");
  const os = await import("node:os");
  const keys = redisKeys(uniquePrefix("symlinked"));
  const real = fs.mkdtempSync(path.join(os.tmpdir(), "claimwatch-real-"));
  const linked = `${real}-link`;
  fs.symlinkSync(real, linked);
  try {
    const parsed = parseDefinitions(
      { rebuilds: { maps: { output: path.join(linked, "maps"), steps: [{ name: "s", run: ["true"] }] } } },
      path.join("/tmp", "claimwatch.yaml"),
    );
    if (!parsed.ok) throw parsed.error;
    const definition = parsed.definitions.rebuilds.get("maps")!;
    const held = claimName(definition.claimPath); // the name run-rebuild claims
    assert.notEqual(held, claimName(definition.outputPath), "the symlink makes the two names differ");
    await client.hset(keys.claimSkips, held, "2");
    const { body } = await collectMetrics({
      main: client,
      claims: client,
      keys,
      definitions: parsed.definitions,
      queue,
    });
    const lines = body.split("\n");
    const skips = lines.filter((line) => line.startsWith("claimwatch_consecutive_skips{"));
    assert.deepEqual(skips, [`claimwatch_consecutive_skips{claim="${held}",rebuild="maps",tenant=""} 2`]);
  } finally {
    fs.rmSync(linked, { force: true });
    fs.rmSync(real, { recursive: true, force: true });
  }
});
