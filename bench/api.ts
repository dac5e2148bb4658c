/**
 * Benchmark (not a test) of the HTTP API at scale: every list call must cost O(page) Redis work
 * however many records exist — no scans, no loading every record.
 *
 * One redis-server this script starts (temp dir, no persistence, stopped by PID) and the real web
 * server (`scripts/web.ts` → `next start`, stopped by PID with its descendants), built first if
 * `.next/BUILD_ID` is missing. Records are seeded with the worker's own writer (`importRunInto`,
 * so the key layout is exactly what the worker writes: HASH per run + global, rebuild,
 * rebuild+tenant and status ZSETs) in pipelined batches, and claims with `acquireClaim` into the
 * claims Redis (logical DB 1, as when CLAIMS_REDIS_URL is not set).
 *
 *   phase 1k — 1 000 run records + 10 000 active claims: measure
 *   phase 1M — the same Redis grown to 1 000 000 run records (same claims, same server): measure
 *
 * The definitions have 10 007 rebuild×tenant rows: the four rebuilds below plus BENCH_FLEET_REBUILDS
 * (100) generated `fleet-NN` rebuilds with BENCH_FLEET_TENANTS (100) tenants `tNNN` each; half the
 * runs go to the fleet rows.
 *
 * Each phase times sequential requests, interleaved in rotating order so drift hits all alike:
 *   runs            GET /api/runs                      (default page, 50)
 *   runs_rebuild    GET /api/runs?rebuild=tiles&limit=50
 *   claims          GET /api/claims?limit=100
 *   runs_walk       GET /api/runs?rebuild=archive&status=failed (its own index since every filter
 *                   combination has one)
 *   rebuilds        GET /api/rebuilds                  (first page, 50 of 10 007 rows)
 *   rebuilds_search GET /api/rebuilds?q=t042           (100 rows match; first page of 50)
 *   claims_search   GET /api/claims?limit=100&q=tenant:acme: (substring; 100 of ~1 430 match, found
 *                   after ~3 000 names)
 *   claims_search_all GET /api/claims?limit=100&q=Archive/99 (substring, any case; ~50 match, so
 *                   every one of the 10 000 registry names is read)
 *   runs_search     GET /api/runs?q=fleet-0&limit=50   (10 rebuilds match; their indexes merged)
 *   timeline        GET /api/runs/timeline?range=24h   (every third round; a day of more than 2 000
 *                   runs answers with the timeline counters' hourly buckets, fewer with the runs)
 *   timeline_7d     GET /api/runs/timeline?range=7d    (every third round; always buckets)
 *   http_floor      GET /api/auth/me                   (no Redis: the HTTP + Next.js floor)
 * (each with a viewer's Bearer token, as a script calling the API would send) plus, to tell Redis
 * work from HTTP overhead, the Redis commands and server µs per request
 * (INFO commandstats deltas) and `listRuns` timed in-process.
 *
 * Env: BENCH_REQUESTS per endpoint and phase (default 300), BENCH_RUNS_SMALL (1000),
 * BENCH_RUNS_LARGE (1000000), BENCH_CLAIMS (10000).
 * Goal: p50 of GET /api/runs at 1M ÷ at 1k ≤ 1.5; at 1M every page's p50 within a small multiple of
 * the floor of the same run (http_floor + that page's raw Redis reads, timed in-process).
 * Last line: RESULT runs_1m_vs_1k=<ratio> claims_p50_ms=<p50 at 1M records, 10k claims> …
 * <page>_page_p95_ms=… search_p95_ms=<worst search p95> timeline_p95_ms=… runs_seeded=…
 * (http_floor_p50_ms is followed by timeline_p95_ms, timeline_view=runs|buckets at the large size
 * and timeline_7d_p95_ms: the timeline against the floor)
 * bytes_per_record=<Redis used_memory delta of the large seeding ÷ its records>
 */
import { spawn, type ChildProcess } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import type { Redis } from "ioredis";
import { stringify } from "yaml";
import { acquireClaim, claimName } from "../lib/claims/index";
import { ensureBuild } from "../lib/launcher/children";
import { closeRedis, createRedis } from "../lib/redis/client";
import { freePort, startRedisServer, type RedisServerHandle } from "../lib/redis/embedded";
import { redisKeys, type RedisKeys } from "../lib/redis/keys";
import { listRuns } from "../lib/runs/list";
import { DEFAULT_RETENTION } from "../lib/runs/records";
import { importRunInto } from "../lib/runs/writer";
import { runIdOf } from "../lib/runs/types";
import { FLEET, FLEET_REBUILDS, FLEET_TARGETS, FLEET_TENANTS, REBUILDS, ROWS, runRecord, TARGETS } from "./run-shape";
import { descendantPids, isRunning, waitForLine, waitUntilGone } from "../test/support/processes";
import { numberFromEnv } from "./env";

const REQUESTS = numberFromEnv("BENCH_REQUESTS", 300, { min: 1 });
const RUNS_SMALL = numberFromEnv("BENCH_RUNS_SMALL", 1_000, { min: 1 });
const RUNS_LARGE = numberFromEnv("BENCH_RUNS_LARGE", 1_000_000, { min: 1 });
const CLAIMS = numberFromEnv("BENCH_CLAIMS", 10_000, { min: 1 });
const GOAL = 1.5;
/**
 * Records per pipeline, and pipelines in flight while seeding. Seeding is bound by this process
 * (ioredis command objects, GC), not Redis: small pipelines keep the garbage short-lived.
 */
const SEED_BATCH = 500;
const SEED_IN_FLIGHT = 4;
const CLAIMS_IN_FLIGHT = 200;
/** Seconds the large seeding may take; what is seeded by then is measured (and reported as such). */
const SEED_BUDGET_S = numberFromEnv("BENCH_SEED_BUDGET_S", 180, { min: 1, integer: false });
const PREFIX = "bench";
/** A viewer may make every call measured here; the server is told this token (CLAIMWATCH_VIEWER_TOKEN). */
const VIEWER_TOKEN = "bench-api-viewer-token-0123456789";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");

const ENDPOINTS = {
  runs: "/api/runs",
  runs_rebuild: "/api/runs?rebuild=tiles&limit=50",
  claims: "/api/claims?limit=100",
  runs_walk: "/api/runs?rebuild=archive&status=failed",
  rebuilds: "/api/rebuilds",
  rebuilds_search: "/api/rebuilds?q=t042",
  claims_search: "/api/claims?limit=100&q=tenant:acme:",
  claims_search_all: "/api/claims?limit=100&q=Archive/99",
  runs_search: "/api/runs?q=fleet-0&limit=50",
  timeline: "/api/runs/timeline?range=24h",
  timeline_7d: "/api/runs/timeline?range=7d",
  http_floor: "/api/auth/me",
} as const;
/** Timed every third round only (a large answer, or informational). */
const EVERY_THIRD = new Set<string>(["runs_walk", "timeline", "timeline_7d"]);
type Endpoint = keyof typeof ENDPOINTS;
const ENDPOINT_NAMES = Object.keys(ENDPOINTS) as Endpoint[];

const say = (line: string) => console.log(line);
/** 1000 → "1k", 1000000 → "1M": phase labels follow BENCH_RUNS_SMALL / BENCH_RUNS_LARGE. */
const sizeLabel = (n: number) =>
  n % 1_000_000 === 0 ? `${n / 1_000_000}M` : n % 1_000 === 0 ? `${n / 1_000}k` : String(n);
const ms = (value: number) => value.toFixed(2);

function percentile(values: number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(p * sorted.length) - 1))]!;
}

// --- seeding ------------------------------------------------------------------------------------

/**
 * Upserts run records `from` … `to - 1` in pipelines of SEED_BATCH, SEED_IN_FLIGHT at a time;
 * stops taking batches after `budgetS` seconds (the records seeded are then `from` … `from + seeded - 1`).
 */
async function seedRuns(
  client: Redis,
  keys: RedisKeys,
  from: number,
  to: number,
  label: string,
  budgetS = Infinity,
): Promise<{ seconds: number; seeded: number }> {
  const started = performance.now();
  const deadline = started + budgetS * 1000;
  const now = Date.now();
  let next = from;
  let done = 0;
  let reported = 0;
  const total = to - from;
  const lane = async () => {
    while (next < to && performance.now() < deadline) {
      const start = next;
      const end = Math.min(to, start + SEED_BATCH);
      next = end;
      const pipeline = client.pipeline();
      for (let i = start; i < end; i++) importRunInto(pipeline, keys, runRecord(i, now), DEFAULT_RETENTION);
      const replies = (await pipeline.exec()) ?? [];
      const failed = replies.find(([error]) => error);
      if (failed) throw failed[0];
      done += end - start;
      if (total >= 100_000 && done - reported >= 100_000) {
        reported = done;
        const s = (performance.now() - started) / 1000;
        say(`  ${label}: ${done.toLocaleString("en")} / ${total.toLocaleString("en")} (${(done / s).toFixed(0)}/s)`);
      }
    }
  };
  await Promise.all(Array.from({ length: SEED_IN_FLIGHT }, lane));
  return { seconds: (performance.now() - started) / 1000, seeded: done };
}

/** `count` active claims (TTL 1 h, so none expires during the bench), CLAIMS_IN_FLIGHT concurrent. */
async function seedClaims(claims: Redis, keys: RedisKeys, count: number): Promise<number> {
  const started = performance.now();
  let next = 0;
  const lane = async () => {
    while (next < count) {
      const i = next++;
      const target = TARGETS[i % TARGETS.length]!;
      const grant = await acquireClaim(
        claims,
        keys,
        claimName(`/srv/out/${target.rebuild}/${i}`, target.tenant),
        {
          workerId: `bench-host-${1000 + (i % 4)}-ab12`,
          jobId: `run-${target.rebuild}-claim-${i}`,
          runId: runIdOf(`run-${target.rebuild}-claim-${i}`, 1),
          rebuild: target.rebuild,
          ...(target.tenant ? { tenant: target.tenant } : {}),
          version: "bench",
        },
        { ttlMs: 3_600_000, refreshEveryMs: 1_800_000 },
      );
      if (grant.status !== "acquired") throw new Error(`claim ${i}: ${grant.status}`);
    }
  };
  await Promise.all(Array.from({ length: CLAIMS_IN_FLIGHT }, lane));
  return (performance.now() - started) / 1000;
}

// --- the web server ------------------------------------------------------------------------------

interface WebServer {
  base: string;
  pid: number;
  stop(): Promise<void>;
}

async function startWeb(env: NodeJS.ProcessEnv, children: Set<ChildProcess>): Promise<WebServer> {
  const port = await freePort();
  const child = spawn(process.execPath, ["--import", "tsx", "scripts/web.ts"], {
    cwd: root,
    env: { ...env, PORT: String(port), HOST: "127.0.0.1", NEXT_TELEMETRY_DISABLED: "1" },
    stdio: ["ignore", "pipe", "pipe"],
  });
  children.add(child);
  let tail = "";
  const keepTail = (chunk: Buffer) => (tail = (tail + chunk.toString()).slice(-4_000));
  child.stdout!.on("data", keepTail);
  child.stderr!.on("data", keepTail);
  await waitForLine(child, /dashboard at/, 90_000);
  let stopping: Promise<void> | undefined;
  return {
    base: `http://127.0.0.1:${port}`,
    pid: child.pid!,
    stop() {
      // `next start` runs in its own process group (lib/launcher/children.ts): collect the
      // descendants first, then stop the launcher and make sure every one of them is gone.
      stopping ??= (async () => {
        const descendants = descendantPids(child.pid!);
        if (child.exitCode === null && child.signalCode === null) child.kill("SIGTERM");
        const left = await waitUntilGone([child.pid!, ...descendants], 15_000);
        for (const pid of left) {
          try {
            process.kill(pid, "SIGKILL");
          } catch {
            // gone meanwhile
          }
        }
        await waitUntilGone(left, 5_000);
        children.delete(child);
        if (left.some(isRunning)) say(`warning: processes ${left.join(", ")} did not stop`);
      })();
      return stopping;
    },
  };
}

// --- measuring -----------------------------------------------------------------------------------

interface Check {
  (endpoint: Endpoint, body: Record<string, unknown>): void;
}

/** What the newest 24 h timeline answer was (runs or buckets), for the RESULT line. */
let lastTimelineView = "";
/** Size of the newest 7 d timeline answer (bytes of its JSON), for the RESULT line. */
let lastTimeline7dBytes = 0;

const checkBody: Check = (endpoint, body) => {
  const fail = (what: string) => {
    throw new Error(`${endpoint}: expected ${what}, got ${JSON.stringify(body).slice(0, 300)}`);
  };
  if (endpoint === "http_floor") {
    if (!body.identity && !body.name && !body.role) fail("the caller");
  } else if (endpoint === "timeline" || endpoint === "timeline_7d") {
    // Runs one by one, or counted buckets; either way the window's runs are there.
    const drawn =
      body.view === "buckets"
        ? ((body.counted as { lanes?: unknown[] } | null)?.lanes ?? undefined)
        : (body.runs as unknown[] | undefined);
    if (!Array.isArray(drawn) || drawn.length === 0) fail(`runs or buckets in the window`);
    if (endpoint === "timeline_7d" && body.view !== "buckets") fail("buckets for 7 d");
    if (endpoint === "timeline") lastTimelineView = String(body.view);
  } else if (endpoint === "rebuilds" || endpoint === "rebuilds_search") {
    const rows = body.rebuilds as { name: string; tenant: string | null }[] | undefined;
    const total = endpoint === "rebuilds" ? ROWS : FLEET_REBUILDS;
    if (!Array.isArray(rows) || rows.length !== Math.min(50, total) || body.total !== total) {
      fail(`a page of 50 of ${total} rows`);
    }
    if (endpoint === "rebuilds_search" && !rows!.every((r) => r.tenant === "t042")) fail("tenant t042 rows");
  } else if (endpoint === "claims_search") {
    const claims = body.claims as { name: string }[] | undefined;
    if (!Array.isArray(claims) || claims.length !== 100 || !claims.every((c) => c.name.startsWith("tenant:acme:"))) {
      fail("100 claims named tenant:acme:…");
    }
  } else if (endpoint === "claims_search_all") {
    const claims = body.claims as { name: string }[] | undefined;
    const some = Math.min(1, CLAIMS);
    if (!Array.isArray(claims) || claims.length < some || claims.length >= 100 || body.nextCursor !== null) {
      fail("a last page of fewer than 100 claims");
    }
    if (!claims!.every((c) => c.name.toLowerCase().includes("archive/99"))) fail("claims named …archive/99…");
  } else if (endpoint === "runs_search") {
    const runs = body.runs as { rebuild: string }[] | undefined;
    if (!Array.isArray(runs) || runs.length !== 50 || !runs.every((r) => r.rebuild.startsWith("fleet-0"))) {
      fail("50 runs of fleet-0x rebuilds");
    }
  } else if (endpoint === "claims") {
    const claims = body.claims as unknown[] | undefined;
    if (!Array.isArray(claims) || claims.length !== Math.min(100, CLAIMS)) {
      throw new Error(
        `${endpoint}: expected ${Math.min(100, CLAIMS)} claims, got ${JSON.stringify(body).slice(0, 300)}`,
      );
    }
  } else {
    const runs = body.runs as unknown[] | undefined;
    const expected = endpoint === "runs_walk" ? 1 : 50;
    if (!Array.isArray(runs) || runs.length < expected) {
      throw new Error(`${endpoint}: expected ≥ ${expected} runs, got ${JSON.stringify(body).slice(0, 300)}`);
    }
  }
};

async function timeRequest(base: string, endpoint: Endpoint): Promise<number> {
  const started = performance.now();
  const response = await fetch(`${base}${ENDPOINTS[endpoint]}`, {
    headers: { authorization: `Bearer ${VIEWER_TOKEN}` },
  });
  const text = await response.text();
  const elapsed = performance.now() - started;
  if (response.status !== 200)
    throw new Error(`${ENDPOINTS[endpoint]}: HTTP ${response.status}: ${text.slice(0, 300)}`);
  checkBody(endpoint, JSON.parse(text) as Record<string, unknown>);
  if (endpoint === "timeline_7d") lastTimeline7dBytes = Buffer.byteLength(text);
  return elapsed;
}

/** Sequential requests, endpoints interleaved in rotating order; EVERY_THIRD ones every third round. */
async function measure(base: string, rounds: number): Promise<Record<Endpoint, number[]>> {
  const samples = Object.fromEntries(ENDPOINT_NAMES.map((e) => [e, [] as number[]])) as Record<Endpoint, number[]>;
  for (let round = 0; round < rounds; round++) {
    const order = ENDPOINT_NAMES.map((_, i) => ENDPOINT_NAMES[(i + round) % ENDPOINT_NAMES.length]!);
    for (const endpoint of order) {
      if (EVERY_THIRD.has(endpoint) && round % 3 !== 0) continue;
      samples[endpoint].push(await timeRequest(base, endpoint));
    }
  }
  return samples;
}

/** Redis commands and server-side µs per request of one endpoint (INFO commandstats deltas). */
async function redisWorkPerRequest(
  admin: Redis,
  base: string,
  endpoint: Endpoint,
  requests = 20,
): Promise<{ commands: number; usec: number; detail: string }> {
  await admin.config("RESETSTAT");
  for (let i = 0; i < requests; i++) await timeRequest(base, endpoint);
  const info = await admin.info("commandstats");
  let commands = 0;
  let usec = 0;
  const parts: string[] = [];
  for (const match of info.matchAll(/^cmdstat_([a-z|]+):calls=(\d+),usec=(\d+)/gm)) {
    const [, name, calls, micros] = match;
    if (name === "info" || name === "config|resetstat") continue;
    commands += Number(calls);
    usec += Number(micros);
    parts.push(`${name}×${(Number(calls) / requests).toFixed(0)}`);
  }
  return { commands: commands / requests, usec: usec / requests, detail: parts.join(" ") };
}

/** `listRuns` in this process: the Redis work of GET /api/runs without HTTP and Next.js. */
async function timeListRuns(client: Redis, keys: RedisKeys, count = 200): Promise<number[]> {
  for (let i = 0; i < 20; i++) await listRuns(client, keys, {}, 50);
  const samples: number[] = [];
  for (let i = 0; i < count; i++) {
    const started = performance.now();
    await listRuns(client, keys, {}, 50);
    samples.push(performance.now() - started);
  }
  return samples;
}

/**
 * The raw Redis reads of one page, in this process (no HTTP, no parsing): the floor a page's
 * API call is compared with (plus `http_floor`, a call that reads nothing).
 *   claims   ZRANGEBYLEX LIMIT 100, then GET + PTTL + HGETALL + HGET per name (one pipeline)
 *   runs     ZREVRANGEBYSCORE LIMIT 50, then HGETALL per run (one pipeline)
 *   rebuilds 50 rows: ZREVRANGEBYSCORE LIMIT 30 per row, then HMGET of 7 fields per run, and the
 *            rows' claims as above (the shape of lib/api/rebuilds.ts's page)
 */
type FloorName = "claims" | "runs" | "rebuilds";
async function rawFloors(
  main: Redis,
  claims: Redis,
  keys: RedisKeys,
  count = 100,
): Promise<Record<FloorName, number[]>> {
  const claimReads = async (names: string[]) => {
    const pipeline = claims.pipeline();
    for (const name of names) {
      pipeline.get(keys.claim(name)).pttl(keys.claim(name)).hgetall(keys.claimMeta(name)).hget(keys.claimSkips, name);
    }
    await pipeline.exec();
  };
  const rows = [...TARGETS, ...FLEET_TARGETS].slice(0, 50);
  const pages: Record<FloorName, () => Promise<unknown>> = {
    claims: async () => claimReads(await claims.zrangebylex(keys.claimRegistry, "-", "+", "LIMIT", 0, 100)),
    runs: async () => {
      const ids = await main.zrevrangebyscore(keys.runIndex(), "+inf", "-inf", "LIMIT", 0, 50);
      const pipeline = main.pipeline();
      for (const id of ids) pipeline.hgetall(keys.run(id));
      await pipeline.exec();
    },
    rebuilds: async () => {
      const ranges = main.pipeline();
      for (const row of rows) {
        const index = keys.runIndex({ rebuild: row.rebuild, ...(row.tenant ? { tenant: row.tenant } : {}) });
        ranges.zrevrangebyscore(index, "+inf", "-inf", "LIMIT", 0, 30);
      }
      const ids = ((await ranges.exec()) ?? []).flatMap(([, reply]) => reply as string[]);
      const records = main.pipeline();
      for (const id of ids) {
        records.hmget(keys.run(id), "id", "status", "reason", "createdAt", "startedAt", "finishedAt", "durationMs");
      }
      await Promise.all([
        records.exec(),
        claimReads(rows.map((row) => claimName(`/srv/out/${row.rebuild}`, row.tenant))),
      ]);
    },
  };
  const samples = { claims: [], runs: [], rebuilds: [] } as Record<FloorName, number[]>;
  for (let i = 0; i < count + 10; i++) {
    for (const name of Object.keys(pages) as FloorName[]) {
      const started = performance.now();
      await pages[name]();
      if (i >= 10) samples[name].push(performance.now() - started);
    }
  }
  return samples;
}

interface PhaseReport {
  label: string;
  records: number;
  samples: Record<Endpoint, number[]>;
  work: Record<Endpoint, { commands: number; usec: number; detail: string }>;
  libListRuns: number[];
  floors: Record<FloorName, number[]>;
}

async function runPhase(
  label: string,
  records: number,
  web: WebServer,
  main: Redis,
  claims: Redis,
  admin: Redis,
  keys: RedisKeys,
): Promise<PhaseReport> {
  say(`[${label}] warm-up … (load average ${os.loadavg()[0]!.toFixed(2)} on ${os.availableParallelism()} CPUs)`);
  await measure(web.base, 60);
  say(`[${label}] ${REQUESTS} sequential requests per endpoint (runs_walk: ${Math.ceil(REQUESTS / 3)}) …`);
  const samples = await measure(web.base, REQUESTS);
  const work = {} as PhaseReport["work"];
  for (const endpoint of ENDPOINT_NAMES) work[endpoint] = await redisWorkPerRequest(admin, web.base, endpoint);
  const libListRuns = await timeListRuns(main, keys);
  const floors = await rawFloors(main, claims, keys);
  for (const endpoint of ENDPOINT_NAMES) {
    const s = samples[endpoint];
    const w = work[endpoint];
    say(
      `[${label}] ${endpoint.padEnd(12)} p50 ${ms(percentile(s, 0.5)).padStart(7)} ms  p95 ${ms(percentile(s, 0.95)).padStart(7)} ms` +
        `  (n=${s.length}; Redis per request: ${w.commands.toFixed(0)} commands, ${w.usec.toFixed(0)} µs — ${w.detail})`,
    );
  }
  say(
    `[${label}] listRuns in-process (limit 50): p50 ${ms(percentile(libListRuns, 0.5))} ms, ` +
      `p95 ${ms(percentile(libListRuns, 0.95))} ms`,
  );
  say(
    `[${label}] raw Redis reads of one page in-process (p50/p95): ` +
      (Object.keys(floors) as FloorName[])
        .map((name) => `${name} ${ms(percentile(floors[name], 0.5))}/${ms(percentile(floors[name], 0.95))} ms`)
        .join(", "),
  );
  return { label, records, samples, work, libListRuns, floors };
}

async function usedMemoryBytes(admin: Redis): Promise<number> {
  const info = await admin.info("memory");
  return Number(/used_memory:(\d+)/.exec(info)?.[1] ?? NaN);
}

async function redisMemory(admin: Redis): Promise<string> {
  const info = await admin.info("memory");
  return /used_memory_human:(\S+)/.exec(info)?.[1] ?? "?";
}

// --- main ----------------------------------------------------------------------------------------

async function main(): Promise<void> {
  const benchStarted = performance.now();
  if (!ensureBuild(root, (line) => say(line))) throw new Error("`next build` failed");

  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "claimwatch-bench-api-"));
  const configFile = path.join(dir, "claimwatch.yaml");
  fs.writeFileSync(configFile, stringify({ rebuilds: { ...REBUILDS, ...FLEET } }));
  const children = new Set<ChildProcess>();
  let server: RedisServerHandle | undefined;
  let web: WebServer | undefined;
  let main: Redis | undefined;
  let claims: Redis | undefined;
  let admin: Redis | undefined;
  const cleanUp = async () => {
    await web?.stop();
    await closeRedis(main);
    await closeRedis(claims);
    await closeRedis(admin);
    await server?.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  };
  const onSignal = () => void cleanUp().finally(() => process.exit(130));
  process.once("SIGINT", onSignal);
  process.once("SIGTERM", onSignal);

  try {
    server = await startRedisServer({ dir, extraArgs: ["--appendonly", "no", "--save", ""] });
    main = createRedis(server.url, "worker", "bench-api:main");
    claims = createRedis(`${server.url}/1`, "worker", "bench-api:claims");
    admin = createRedis(server.url, "worker", "bench-api:admin");
    const keys = redisKeys(PREFIX);
    say(
      `redis-server pid ${server.pid} on ${server.url} (no persistence); rebuilds ${Object.keys(REBUILDS).join(", ")} ` +
        `and ${FLEET_REBUILDS} fleet-NN × ${FLEET_TENANTS} tenants (${ROWS.toLocaleString("en")} rebuild/tenant rows); ` +
        `${REQUESTS} requests per endpoint and phase`,
    );

    const { seconds: smallSeconds } = await seedRuns(main, keys, 0, RUNS_SMALL, "runs");
    const claimSeconds = await seedClaims(claims, keys, CLAIMS);
    say(
      `seeded ${RUNS_SMALL.toLocaleString("en")} run records in ${smallSeconds.toFixed(2)} s, ` +
        `${CLAIMS.toLocaleString("en")} claims in ${claimSeconds.toFixed(2)} s (${(CLAIMS / claimSeconds).toFixed(0)}/s); ` +
        `Redis memory ${await redisMemory(admin)}`,
    );

    web = await startWeb(
      {
        ...process.env,
        REDIS_URL: server.url,
        CLAIMS_REDIS_URL: "",
        CLAIMWATCH_CONFIG: configFile,
        CLAIMWATCH_DATA_DIR: path.join(dir, ".data"),
        CLAIMWATCH_KEY_PREFIX: PREFIX,
        CLAIMWATCH_VIEWER_TOKEN: `bench:${VIEWER_TOKEN}`,
        CLAIMWATCH_OPERATOR_TOKEN: "",
      },
      children,
    );
    say(`web server pid ${web.pid} at ${web.base}`);
    const small = await runPhase(sizeLabel(RUNS_SMALL), RUNS_SMALL, web, main, claims, admin, keys);

    say(`seeding up to ${RUNS_LARGE.toLocaleString("en")} run records (budget ${SEED_BUDGET_S} s) …`);
    const memoryBefore = await usedMemoryBytes(admin);
    const { seconds: largeSeconds, seeded } = await seedRuns(main, keys, RUNS_SMALL, RUNS_LARGE, "runs", SEED_BUDGET_S);
    const runsSeeded = RUNS_SMALL + seeded;
    const runsPerSecond = seeded / largeSeconds;
    const memory = await redisMemory(admin);
    // Redis bytes per run record: the used_memory delta of the large seeding ÷ its records.
    const bytesPerRecord = ((await usedMemoryBytes(admin)) - memoryBefore) / seeded;
    const indexed = await main.zcard(keys.runIndex());
    const dbsize = await main.dbsize();
    say(
      `seeded ${seeded.toLocaleString("en")} more run records in ${largeSeconds.toFixed(1)} s ` +
        `(${runsPerSecond.toFixed(0)}/s); global index ${indexed.toLocaleString("en")}, ` +
        `${dbsize.toLocaleString("en")} keys in DB 0; Redis memory ${memory}`,
    );
    if (runsSeeded < RUNS_LARGE) {
      say(
        `the seeding budget ran out: ${runsSeeded.toLocaleString("en")} of ${RUNS_LARGE.toLocaleString("en")} runs; ` +
          `at ${runsPerSecond.toFixed(0)}/s all of them would take ` +
          `${((RUNS_LARGE - RUNS_SMALL) / runsPerSecond).toFixed(0)} s (BENCH_SEED_BUDGET_S)`,
      );
    }
    if (indexed !== runsSeeded) throw new Error(`expected ${runsSeeded} indexed runs, found ${indexed}`);
    const large = await runPhase(sizeLabel(runsSeeded), runsSeeded, web, main, claims, admin, keys);
    const timelineViewLarge = lastTimelineView;

    // --- report ---
    const p50 = (phase: PhaseReport, endpoint: Endpoint) => percentile(phase.samples[endpoint], 0.5);
    const p95 = (phase: PhaseReport, endpoint: Endpoint) => percentile(phase.samples[endpoint], 0.95);
    say("");
    const [a, b] = [small.label, large.label];
    say(
      `${"endpoint".padEnd(44)} ${`p50 ${a}`.padStart(7)}  ${`p95 ${a}`.padStart(7)}  ${`p50 ${b}`.padStart(7)}  ` +
        `${`p95 ${b}`.padStart(7)}   ${b}÷${a} (p50)`,
    );
    for (const endpoint of ENDPOINT_NAMES) {
      say(
        `${`GET ${ENDPOINTS[endpoint]}`.padEnd(44)} ${ms(p50(small, endpoint)).padStart(7)}  ${ms(p95(small, endpoint)).padStart(7)}  ` +
          `${ms(p50(large, endpoint)).padStart(7)}  ${ms(p95(large, endpoint)).padStart(7)}   ` +
          `${(p50(large, endpoint) / p50(small, endpoint)).toFixed(3)}`,
      );
    }
    const libRatio = percentile(large.libListRuns, 0.5) / percentile(small.libListRuns, 0.5);
    say(
      `${"listRuns in-process (limit 50)".padEnd(44)} ${ms(percentile(small.libListRuns, 0.5)).padStart(7)}  ` +
        `${ms(percentile(small.libListRuns, 0.95)).padStart(7)}  ${ms(percentile(large.libListRuns, 0.5)).padStart(7)}  ` +
        `${ms(percentile(large.libListRuns, 0.95)).padStart(7)}   ${libRatio.toFixed(3)}`,
    );
    const runsRatio = p50(large, "runs") / p50(small, "runs");
    const filteredRatio = p50(large, "runs_rebuild") / p50(small, "runs_rebuild");
    const claimsRatio = p50(large, "claims") / p50(small, "claims");
    say(
      `goal: GET /api/runs ${b}÷${a} ≤ ${GOAL}: ${runsRatio.toFixed(3)} ${runsRatio <= GOAL ? "met" : "MISSED"}; ` +
        `filtered ${filteredRatio.toFixed(3)} ${filteredRatio <= GOAL ? "met" : "MISSED"}; ` +
        `Redis commands per GET /api/runs: ${small.work.runs.commands.toFixed(0)} at ${a}, ${large.work.runs.commands.toFixed(0)} at ${b}; ` +
        `total ${((performance.now() - benchStarted) / 1000).toFixed(0)} s`,
    );
    // Each page at the large size ÷ its floor in the same run: the no-Redis HTTP call plus the
    // page's raw Redis reads in-process (p50s).
    const floorOf = (name: FloorName) => p50(large, "http_floor") + percentile(large.floors[name], 0.5);
    const vsFloor = {
      claims: p50(large, "claims") / floorOf("claims"),
      claims_search: p50(large, "claims_search") / floorOf("claims"),
      runs: p50(large, "runs") / floorOf("runs"),
      runs_search: p50(large, "runs_search") / floorOf("runs"),
      rebuilds: p50(large, "rebuilds") / floorOf("rebuilds"),
      rebuilds_search: p50(large, "rebuilds_search") / floorOf("rebuilds"),
    };
    say(
      `at ${b}, p50 ÷ floor (http_floor ${ms(p50(large, "http_floor"))} ms + the page's raw Redis reads): ` +
        Object.entries(vsFloor)
          .map(([name, ratio]) => `${name} ${ratio.toFixed(2)}`)
          .join(", "),
    );
    const searchP95 = Math.max(
      p95(large, "claims_search"),
      p95(large, "claims_search_all"),
      p95(large, "rebuilds_search"),
      p95(large, "runs_search"),
    );
    say(
      `RESULT runs_1m_vs_1k=${runsRatio.toFixed(3)} claims_p50_ms=${ms(p50(large, "claims"))} ` +
        `runs_p50_1k_ms=${ms(p50(small, "runs"))} runs_p50_1m_ms=${ms(p50(large, "runs"))} ` +
        `runs_filtered_1m_vs_1k=${filteredRatio.toFixed(3)} claims_1m_vs_1k=${claimsRatio.toFixed(3)} ` +
        `claims_p50_1k_ms=${ms(p50(small, "claims"))} list_runs_lib_1m_vs_1k=${libRatio.toFixed(3)} ` +
        `seed_1m_s=${largeSeconds.toFixed(1)} redis_memory_1m=${memory} bytes_per_record=${bytesPerRecord.toFixed(0)} ` +
        `seed_runs_per_s=${runsPerSecond.toFixed(0)} load_avg=${os.loadavg()[0]!.toFixed(2)} ` +
        `rebuild_rows=${ROWS} claims_seeded=${CLAIMS} ` +
        `claims_page_vs_floor=${vsFloor.claims.toFixed(2)} rebuilds_page_vs_floor=${vsFloor.rebuilds.toFixed(2)} ` +
        `runs_page_vs_floor=${vsFloor.runs.toFixed(2)} search_vs_floor=${Math.max(vsFloor.claims_search, vsFloor.rebuilds_search, vsFloor.runs_search).toFixed(2)} ` +
        `http_floor_p50_ms=${ms(p50(large, "http_floor"))} timeline_p95_ms=${ms(p95(large, "timeline"))} ` +
        `timeline_view=${timelineViewLarge} timeline_7d_p95_ms=${ms(p95(large, "timeline_7d"))} timeline_7d_bytes=${lastTimeline7dBytes} ` +
        `claims_page_p95_ms=${ms(p95(large, "claims"))} rebuilds_page_p95_ms=${ms(p95(large, "rebuilds"))} ` +
        `runs_page_p95_ms=${ms(p95(large, "runs"))} runs_filtered_p95_ms=${ms(p95(large, "runs_rebuild"))} ` +
        `search_p95_ms=${ms(searchP95)} claims_search_p95_ms=${ms(p95(large, "claims_search"))} claims_search_all_p95_ms=${ms(p95(large, "claims_search_all"))} runs_seeded=${runsSeeded}`,
    );
  } finally {
    process.off("SIGINT", onSignal);
    process.off("SIGTERM", onSignal);
    await cleanUp();
  }
}

await main();
