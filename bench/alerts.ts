/**
 * Benchmark (not a test): one alert evaluation cycle and one `/metrics` scrape (collectMetrics, the
 * route's whole work minus HTTP) with 1 000 rebuild × tenant series (100 rebuilds × 10 tenants,
 * half of them scheduled, each with run counters and a duration histogram) and first 1 000, then
 * 10 000 active claims (the series' claims plus others, some stale, 1 000 with skips). On one
 * redis-server this script starts (temp dir, no persistence, stopped by PID).
 *
 * Goals (issue 16): evaluation p50 ≤ 50 ms, scrape p50 ≤ 200 ms at 10k claims, growth 1k → 10k at
 * most linear (≤ 10×).
 *
 * Each figure also prints its CPU per sample (this process, and redis-server from INFO cpu): steadier
 * than wall time when other work loads the machine.
 * Env: BENCH_SAMPLES (default 25) per figure. BENCH_PROFILE=<dir>: also write one V8 CPU profile
 * per figure (`<dir>/{eval,scrape}-{1k,10k}.cpuprofile`, the samples' loop only) and print the
 * Redis commands each figure's loop ran (`INFO commandstats`, both databases share the server).
 * Last line: RESULT eval_p50_ms=… scrape_p50_ms=… scrape_10k_vs_1k=… eval_10k_vs_1k=… (p50s at 10k claims)
 */
import fs from "node:fs";
import { Session } from "node:inspector/promises";
import os from "node:os";
import path from "node:path";
import { Queue } from "bullmq";
import { Redis } from "ioredis";
import { AlertEvaluator } from "../lib/alerts/evaluator";
import { acquireClaim, claimName } from "../lib/claims/index";
import { collectMetrics } from "../lib/metrics/collect";
import { DURATION_BUCKETS } from "../lib/metrics/counters";
import { parseDefinitions } from "../lib/rebuilds/definitions";
import { queuePrefix, REBUILD_QUEUE } from "../lib/rebuilds/queue";
import { startRedisServer } from "../lib/redis/embedded";
import { redisKeys } from "../lib/redis/keys";
import { numberFromEnv } from "./env";

const SAMPLES = numberFromEnv("BENCH_SAMPLES", 25, { min: 1 });
const REBUILDS = 100;
const TENANTS = 10;

const dir = fs.mkdtempSync(path.join(os.tmpdir(), "claimwatch-bench-alerts-"));
const server = await startRedisServer({ dir, extraArgs: ["--appendonly", "no", "--save", ""] });
const main = new Redis(server.url, { maxRetriesPerRequest: null });
const claims = new Redis(`${server.url}/1`, { maxRetriesPerRequest: null });
const keys = redisKeys("bench");
const say = (line: string) => process.stdout.write(`${line}\n`);
const profileDir = process.env.BENCH_PROFILE;
const session = profileDir ? new Session() : null;

try {
  const tenants = Array.from({ length: TENANTS }, (_, i) => `t${i}`);
  const rebuilds: Record<string, unknown> = {};
  for (let r = 0; r < REBUILDS; r++) {
    rebuilds[`r${r}`] = {
      output: `/srv/bench/r${r}`,
      tenants,
      ...(r % 2 === 0 ? { schedule: { cron: "0 * * * *" } } : {}),
      steps: [{ name: "s", run: ["true"] }],
    };
  }
  const parsed = parseDefinitions({ rebuilds, alerts: {} }, path.join(dir, "claimwatch.yaml"));
  if (!parsed.ok) throw parsed.error;
  const definitions = parsed.definitions;
  const [seconds] = await main.time();
  const now = Number(seconds) * 1000;

  // Counters and histograms for every series; scheduler history so ticks are expected.
  const seed = main.pipeline();
  for (const [name, definition] of definitions.rebuilds) {
    for (const tenant of tenants) {
      const series = `${name}|${tenant}`;
      seed.hset(
        keys.metricsCounters,
        `runs|${series}|rebuilt`,
        "40",
        `runs|${series}|skipped`,
        "7",
        `runs|${series}|failed`,
        "2",
      );
      for (const bound of DURATION_BUCKETS.slice(0, 6)) seed.hset(keys.metricsCounters, `dur|${series}|${bound}`, "7");
      seed.hset(
        keys.metricsCounters,
        `dursum|${series}`,
        "1234.5",
        `durcount|${series}`,
        "42",
        `lastsuccess|${series}`,
        String(now),
      );
      if (definition.schedule) seed.set(keys.schedulerSince(`sched.${name}.${tenant}`), String(now - 7_200_000));
    }
  }
  await seed.exec();

  let held = 0;
  async function holdClaims(total: number): Promise<void> {
    const names: string[] = [];
    for (const definition of definitions.rebuilds.values()) {
      for (const tenant of tenants) names.push(claimName(definition.outputPath, tenant));
    }
    for (let i = 0; names.length < total; i++) names.push(claimName(`/srv/bench/extra/${i}`));
    const todo = names.slice(held, total);
    for (let i = 0; i < todo.length; i += 200) {
      await Promise.all(
        todo.slice(i, i + 200).map((name, j) =>
          acquireClaim(
            claims,
            keys,
            name,
            // One in ten holders is no live worker: stale, as in a bad night.
            { workerId: (held + i + j) % 10 === 0 ? "gone-worker" : "", jobId: `job-${i + j}` },
            { ttlMs: 600_000, refreshEveryMs: 60_000 },
          ),
        ),
      );
    }
    const skips = claims.pipeline();
    for (const name of todo.slice(0, 1_000)) skips.hset(keys.claimSkips, name, "2");
    await skips.exec();
    held = total;
  }

  const queue = new Queue(REBUILD_QUEUE, { connection: main, prefix: queuePrefix(keys) });
  const evaluator = new AlertEvaluator({
    main,
    claims,
    keys,
    definitions,
    schedulers: queue,
    config: definitions.alerts!,
    publicOrigin: "http://127.0.0.1:3000",
    role: "worker",
  });

  if (session) {
    fs.mkdirSync(profileDir!, { recursive: true });
    session.connect();
    await session.post("Profiler.enable");
  }
  /** The redis-server's CPU time so far (ms, user + system). */
  const redisCpu = async () => {
    const info = String(await main.info("cpu"));
    const field = (name: string) => Number(new RegExp(`${name}:([\\d.]+)`).exec(info)?.[1] ?? 0);
    return (field("used_cpu_user") + field("used_cpu_sys")) * 1000;
  };
  /** CPU per sample of `loop` (this process, and Redis): steadier than wall time on a loaded machine. */
  async function cpuOf(loop: () => Promise<void>): Promise<{ node: number; redis: number }> {
    const redisBefore = await redisCpu();
    const nodeBefore = process.cpuUsage();
    await loop();
    const node = process.cpuUsage(nodeBefore);
    return { node: (node.user + node.system) / 1000 / SAMPLES, redis: ((await redisCpu()) - redisBefore) / SAMPLES };
  }
  /** Runs `loop` under the profiler (BENCH_PROFILE) and prints its Redis commands per sample. */
  async function profiled(name: string, loop: () => Promise<void>): Promise<void> {
    if (!session) return loop();
    await main.config("RESETSTAT");
    const cpuBefore = await redisCpu();
    await session.post("Profiler.start");
    await loop();
    const { profile } = await session.post("Profiler.stop");
    const cpuMs = ((await redisCpu()) - cpuBefore) / SAMPLES;
    fs.writeFileSync(path.join(profileDir!, `${name}.cpuprofile`), JSON.stringify(profile));
    const stats = String(await main.info("commandstats"))
      .split(/\r?\n/)
      .map((line) => /^cmdstat_([^:]+):calls=(\d+),usec=(\d+)/.exec(line))
      .filter((m): m is RegExpExecArray => m !== null)
      .map((m) => ({ command: m[1]!, calls: Number(m[2]) / SAMPLES, ms: Number(m[3]) / 1000 / SAMPLES }))
      .filter((c) => c.command !== "config" && c.command !== "info")
      .sort((a, b) => b.ms - a.ms);
    // A script's time includes the commands it ran, which are also counted on their own.
    say(
      `  ${name} redis per sample: CPU ${cpuMs.toFixed(1)} ms; ${stats
        .slice(0, 8)
        .map((c) => `${c.command} ${c.calls.toFixed(0)}× ${c.ms.toFixed(1)} ms`)
        .join(", ")}`,
    );
  }

  const p50 = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;
  async function measure(label: string, tag: string): Promise<{ evalMs: number; scrapeMs: number; bytes: number }> {
    const first = await evaluator.tick(); // takes the claim, commits the first firing set
    if (!evaluator.leading) throw new Error("the bench evaluator did not get the claim");
    const evals: number[] = [];
    const evalCpu = await cpuOf(() =>
      profiled(`eval-${tag}`, async () => {
        for (let i = 0; i < SAMPLES; i++) {
          const start = performance.now();
          await evaluator.evaluate();
          evals.push(performance.now() - start);
        }
      }),
    );
    const scrapes: number[] = [];
    let bytes = 0;
    const scrapeCpu = await cpuOf(() =>
      profiled(`scrape-${tag}`, async () => {
        for (let i = 0; i < SAMPLES; i++) {
          const start = performance.now();
          const { body } = await collectMetrics({ main, claims, keys, definitions, queue });
          scrapes.push(performance.now() - start);
          bytes = body.length;
        }
      }),
    );
    const result = { evalMs: p50(evals), scrapeMs: p50(scrapes), bytes };
    say(
      `${label}: first cycle ${first.status} (${first.active} active); eval p50 ${result.evalMs.toFixed(1)} ms, scrape p50 ${result.scrapeMs.toFixed(1)} ms (${(bytes / 1024).toFixed(0)} KiB)`,
    );
    const cpu = (c: { node: number; redis: number }) => `node ${c.node.toFixed(1)} + redis ${c.redis.toFixed(1)} ms`;
    say(`  CPU per sample: eval ${cpu(evalCpu)}; scrape ${cpu(scrapeCpu)}`);
    return result;
  }

  await holdClaims(1_000);
  const small = await measure("1k claims, 1k series", "1k");
  await holdClaims(10_000);
  const large = await measure("10k claims, 1k series", "10k");
  await evaluator.stop();
  await queue.close();
  say(
    `RESULT eval_p50_ms=${large.evalMs.toFixed(1)} scrape_p50_ms=${large.scrapeMs.toFixed(1)} scrape_10k_vs_1k=${(large.scrapeMs / small.scrapeMs).toFixed(2)} eval_10k_vs_1k=${(large.evalMs / small.evalMs).toFixed(2)}`,
  );
} finally {
  session?.disconnect();
  main.disconnect();
  claims.disconnect();
  await server.stop(5_000);
  fs.rmSync(dir, { recursive: true, force: true });
}
