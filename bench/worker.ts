/**
 * Benchmark (not a test) of the rebuild worker, on one redis-server this script starts (temp
 * dir, stopped by PID). Five sides, each a BullMQ worker in this process on the same Redis:
 *
 *   raw       — BullMQ Queue + Worker, processor `async () => null`
 *   floor     — one GET per job and nothing else: the ceiling of any pipeline that asks Redis
 *               anything per job
 *   naive     — the issue's baseline: claim, idempotency key, run record and release as four
 *               separate round trips (SET NX PX; GET; HSET; Lua compare-and-delete), no disk
 *   pipeline  — `startRebuildWorker` (worker/rebuild-worker.ts) running fresh no-op rebuilds
 *               (`steps: []`, a distinct version per job): the full pipeline (idempotency check,
 *               claim acquire ∥ second check, work dir, hash, promote, fenced publish, `current`,
 *               run records, release, final MULTI with the idempotency SET, skip reset) minus user
 *               work. A `run` step would measure process spawns instead.
 *   repeat    — the same worker running duplicates of a version already rebuilt (each output's
 *               version is rebuilt once before the clock starts): the at-least-once repeat that
 *               claimwatch exists to make harmless. One round trip per job (already-rebuilt.ts).
 *
 * Every side uses the same connection options (lib/redis/client.ts), job options
 * (`jobOptionsFor`) and worker options (`DEFAULT_WORKER_OPTIONS` and the job retention), at
 * concurrency 1 and 16. Jobs are added to a paused queue; the clock runs from `resume` until the
 * last `completed` event. Jobs are spread over OUTPUTS rebuilds with distinct outputs, so
 * concurrent jobs never wait on one another's claims; the outcome counts prove it. Rounds rotate
 * the order of the sides, so drift hits all of them alike.
 *
 * Each round also times the disk part of a no-op rebuild alone (work dir, hash, promote, the
 * durable published-fence record, `current`), which bounds the c1 ratio from above whatever the
 * Redis round trips cost.
 *
 * Then kill→resume with the default worker settings: two real worker processes
 * (`worker/index.ts`), one slow job, SIGKILL the worker that runs it as soon as its run record
 * says `running`, and time until the next attempt's record says `running` (its `startedAt`)
 * on the other worker. Goal: within 10 s.
 *
 * Redis runs without persistence (BENCH_AOF=1: with AOF everysec, as the embedded Redis runs).
 * Jobs per phase differ by side (raw is 5-15× faster than a fresh rebuild), so that every phase
 * runs for about a second or more; throughput is per job, so the counts do not enter the ratios.
 * Env: BENCH_ROUNDS (3), BENCH_SCALE (1: multiplies the job counts), BENCH_KILLS (3), BENCH_ONLY
 * (e.g. `floor,repeat`: time only these sides, each round, and print their jobs/s: for profiling
 * one side with `node --cpu-prof`; the figures below need every side and are not printed then).
 * Last line: RESULT pipeline_vs_raw_c1=<ratio> pipeline_vs_raw_c16=<ratio> kill_to_resume_s=<max s>
 * repeat_vs_raw_c1=… repeat_vs_raw_c16=… naive_vs_raw_c1=… naive_vs_raw_c16=… floor_vs_raw_c1=… … (ratios of median
 * jobs/s; kill_to_resume_s is the slowest of the kills) … rt_fresh= rt_repeat= (round trips per job
 * on the pipeline's own clients, BullMQ's not counted) repeat_vs_floor_c1= repeat_vs_floor_c16=
 * (repeat vs the one-GET floor) fresh_vs_floor_c1= (fresh vs one-GET floor time + disk floor)
 * repeat_redis_cpu_us= floor_redis_cpu_us= repeat_node_cpu_us= floor_node_cpu_us= (CPU per job at
 * c16: Redis' main thread, this process) repeat_ceiling_c1= repeat_ceiling_c16= (what
 * repeat_vs_floor could reach if the repeat's JavaScript cost nothing, its extra Redis work left).
 */
import { spawn, type ChildProcess } from "node:child_process";
import crypto from "node:crypto";
import fs from "node:fs";
import fsp from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { Queue, Worker } from "bullmq";
import type { Redis } from "ioredis";
import { stringify } from "yaml";
import { startRedisServer, type RedisServerHandle } from "../lib/redis/embedded";
import { closeRedis, createRedis } from "../lib/redis/client";
import { redisKeys, type RedisKeys } from "../lib/redis/keys";
import { parseDefinitions, type Definitions } from "../lib/rebuilds/definitions";
import { hashDirectory, promoteBuild, workDirOf } from "../lib/rebuilds/output";
import { markHolding, otherHolders } from "../lib/rebuilds/holding-marks";
import { markFenceGranted, pointCurrentAtRecord, recordPublishedFence } from "../lib/rebuilds/published-fence";
import { jobOptionsFor, jobRetention, queuePrefix, REBUILD_QUEUE, type RebuildJobData } from "../lib/rebuilds/queue";
import { triggerRebuild } from "../lib/rebuilds/trigger";
import type { RebuildOutcome } from "../lib/rebuilds/run-rebuild";
import { readRun } from "../lib/runs/records";
import type { RunRecord } from "../lib/runs/types";
import { newWorkerIdentity } from "../lib/workers/heartbeat";
import { DEFAULT_WORKER_OPTIONS, startRebuildWorker } from "../worker/rebuild-worker";
import { listFromEnv, numberFromEnv } from "./env";
import { entryArguments } from "../lib/launcher/bundle.mjs";

const SIDES = ["raw", "floor", "naive", "pipeline", "repeat"] as const;
type Side = (typeof SIDES)[number];

const ROUNDS = numberFromEnv("BENCH_ROUNDS", 3, { min: 1 });
const SCALE = numberFromEnv("BENCH_SCALE", 1, { min: 0.01, integer: false });
const JOBS: Record<Side, Record<number, number>> = {
  raw: { 1: Math.round(4_000 * SCALE), 16: Math.round(10_000 * SCALE) },
  floor: { 1: Math.round(3_000 * SCALE), 16: Math.round(8_000 * SCALE) },
  naive: { 1: Math.round(2_000 * SCALE), 16: Math.round(5_000 * SCALE) },
  pipeline: { 1: Math.round(1_200 * SCALE), 16: Math.round(3_000 * SCALE) },
  repeat: { 1: Math.round(2_000 * SCALE), 16: Math.round(5_000 * SCALE) },
};
const KILLS = numberFromEnv("BENCH_KILLS", 3);
const AOF = process.env.BENCH_AOF === "1";
const ONLY = listFromEnv("BENCH_ONLY", SIDES);
const CONCURRENCIES = [1, 16] as const;
/** Distinct outputs (one rebuild each) the jobs are spread over; > 2 × the highest concurrency. */
const OUTPUTS = 64;
const KILL_GOAL_S = 10;

interface Bench {
  dir: string;
  server: RedisServerHandle;
  /** Queue connection and main Redis of the pipeline (role "worker", as in worker/index.ts). */
  main: Redis;
  /** Claims Redis: logical DB 1 of the same server, as when CLAIMS_REDIS_URL is not set. */
  claims: Redis;
  definitions: Definitions;
  children: Set<ChildProcess>;
}

interface PhaseResult {
  jobsPerSec: number;
  ms: number;
  outcomes: Record<string, number>;
  /** Round trips of the measured jobs, when counted (`roundTripsPerJob`). */
  roundTrips?: number;
  /** CPU per job (µs) while the jobs ran: this process (BullMQ, the pipeline) and Redis' main thread. */
  cpuUs: { node: number; redis: number };
}

/** CPU seconds Redis' main thread has used (INFO cpu): where every command and script runs. */
async function redisCpuSeconds(client: Redis): Promise<number> {
  const info = await client.info("cpu");
  const field = (name: string) => Number(new RegExp(`${name}:([\\d.]+)`).exec(info)?.[1] ?? NaN);
  return field("used_cpu_user_main_thread") + field("used_cpu_sys_main_thread");
}

const median = (values: number[]) => {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
};

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** No-op rebuilds `bench-00` … : validated like a definitions file, then stripped of their steps. */
function noOpDefinitions(dir: string): Definitions {
  const rebuilds: Record<string, unknown> = {};
  for (let i = 0; i < OUTPUTS; i++) {
    rebuilds[rebuildName(i)] = {
      output: `out/${rebuildName(i)}`,
      steps: [{ name: "placeholder", run: ["true"] }],
    };
  }
  const parsed = parseDefinitions({ rebuilds }, path.join(dir, "bench.yaml"));
  if (!parsed.ok) throw parsed.error;
  for (const definition of parsed.definitions.rebuilds.values()) definition.steps = [];
  return parsed.definitions;
}

const rebuildName = (i: number) => `bench-${String(i % OUTPUTS).padStart(2, "0")}`;

const NAIVE_RELEASE = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`;

/**
 * One Redis round trip per job (a GET of the job's idempotency key) and nothing else: the
 * ceiling of any pipeline that asks Redis anything at all per job.
 */
function floorProcessor(bench: Bench, keys: RedisKeys) {
  return async (job: { data: RebuildJobData }) =>
    (await bench.main.get(keys.idempotency(`${job.data.rebuild}:${job.data.version}`))) ? "skipped" : "done";
}

/**
 * The issue's "naive pipeline": claim, idempotency key, run record and release as four separate
 * round trips (SET NX PX; GET; HSET; Lua compare-and-delete), no fence, no indexes, no disk.
 */
function naiveProcessor(bench: Bench, keys: RedisKeys) {
  return async (job: { id?: string; data: RebuildJobData }) => {
    const { rebuild, version } = job.data;
    const claimKey = keys.claim(`naive:${rebuild}`);
    const token = crypto.randomUUID();
    if (!(await bench.claims.set(claimKey, token, "PX", 30_000, "NX"))) return "held";
    const done = await bench.main.get(keys.idempotency(`${rebuild}:${version}`));
    await bench.main.hset(keys.run(`${job.id}-1`), {
      id: `${job.id}-1`,
      rebuild,
      version: version ?? "",
      status: done ? "skipped" : "rebuilt",
      finishedAt: Date.now(),
    });
    await bench.claims.eval(NAIVE_RELEASE, 1, claimKey, token);
    return done ? "skipped" : "rebuilt";
  };
}

/** The version every job of a `repeat` phase asks for; rebuilt once per output before the clock starts. */
const REPEAT_VERSION = "repeat";

/**
 * Adds `count` jobs to a paused queue, runs one side until all completed; jobs/s from resume.
 * A `repeat` phase first rebuilds REPEAT_VERSION of every output (untimed), so each timed job is
 * the duplicate of a version already rebuilt.
 */
async function runPhase(
  bench: Bench,
  side: Side,
  concurrency: number,
  count: number,
  label: string,
  /** BullMQ's connection (the pipeline's own clients are `bench.main` and `bench.claims`). */
  queueConnection: Redis = bench.main,
  roundTrips?: () => { main: number; claims: number },
) {
  const keys = redisKeys(`bench-${label}-${crypto.randomBytes(3).toString("hex")}`);
  const queue = new Queue<RebuildJobData>(REBUILD_QUEUE, { connection: queueConnection, prefix: queuePrefix(keys) });
  await queue.pause();
  const anyDefinition = bench.definitions.rebuilds.values().next().value!;
  const options = jobOptionsFor(anyDefinition, bench.definitions.retention);
  const addJobs = (n: number, version: (i: number) => string) =>
    queue.addBulk(
      Array.from({ length: n }, (_, i) => ({
        name: rebuildName(i),
        data: { rebuild: rebuildName(i), version: version(i), force: false, trigger: "api" as const },
        opts: { ...options, jobId: `run-${crypto.randomUUID()}` },
      })),
    );

  const outcomes: Record<string, number> = {};
  let done = 0;
  let expected = side === "repeat" ? OUTPUTS : count;
  let finished!: () => void;
  let allDone = new Promise<void>((resolve) => (finished = resolve));
  const count1 = (status: string) => {
    outcomes[status] = (outcomes[status] ?? 0) + 1;
    if (++done === expected) finished();
  };
  const problems: string[] = [];
  let worker: Worker;
  if (side === "raw" || side === "floor" || side === "naive") {
    const processor = { raw: async () => null, floor: floorProcessor(bench, keys), naive: naiveProcessor(bench, keys) }[
      side
    ];
    worker = new Worker(REBUILD_QUEUE, processor, {
      connection: queueConnection,
      prefix: queuePrefix(keys),
      concurrency,
      lockDuration: DEFAULT_WORKER_OPTIONS.lockDuration,
      stalledInterval: DEFAULT_WORKER_OPTIONS.stalledInterval,
      maxStalledCount: 1,
      maxStartedAttempts: 20,
      ...jobRetention(bench.definitions.retention),
    });
    worker.on("completed", (_job, status: string | null) => count1(status ?? "done"));
  } else {
    worker = startRebuildWorker(
      {
        connection: queueConnection,
        main: bench.main,
        claims: bench.claims,
        keys,
        definitions: bench.definitions,
        worker: newWorkerIdentity("bench"),
        retention: { maxPerRebuild: bench.definitions.retention.runs, maxAgeMs: bench.definitions.retention.runAge },
        // Per-job outcome lines are counted below; anything else (deferrals, errors) is kept.
        log: (line) => {
          if (!/: (rebuilt|skipped)$/.test(line) && problems.length < 5) problems.push(line);
        },
      },
      { ...DEFAULT_WORKER_OPTIONS, concurrency },
    ).worker;
    worker.on("completed", (_job, outcome: RebuildOutcome) =>
      count1(outcome.status === "skipped" ? `skipped ${outcome.reason}` : outcome.status),
    );
  }
  worker.on("failed", (job, error) => {
    if (problems.length < 5) problems.push(`job ${job?.id}: failed: ${error.message}`);
    count1("failed");
  });
  try {
    await worker.waitUntilReady();
    if (side === "repeat") {
      await addJobs(OUTPUTS, () => REPEAT_VERSION);
      await queue.resume();
      await allDone;
      await queue.pause();
      if (outcomes.rebuilt !== OUTPUTS) throw new Error(`${label}: priming: ${JSON.stringify(outcomes)}`);
      for (const status of Object.keys(outcomes)) delete outcomes[status];
      done = 0;
      expected = count;
      allDone = new Promise<void>((resolve) => (finished = resolve));
    }
    await addJobs(count, side === "repeat" ? () => REPEAT_VERSION : (i) => `${label}-${i}`);
    const countedBefore = roundTrips?.();
    const redisCpuBefore = await redisCpuSeconds(bench.main);
    const nodeCpuBefore = process.cpuUsage();
    const started = performance.now();
    await queue.resume();
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () => reject(new Error(`${label}: ${done}/${count} jobs after 120 s; ${problems.join("; ")}`)),
        120_000,
      );
    });
    await Promise.race([allDone, timeout]).finally(() => clearTimeout(timer));
    const ms = performance.now() - started;
    const nodeCpu = process.cpuUsage(nodeCpuBefore);
    const cpuUs = {
      node: (nodeCpu.user + nodeCpu.system) / count,
      redis: (((await redisCpuSeconds(bench.main)) - redisCpuBefore) * 1e6) / count,
    };
    for (const line of problems) console.log(`  ${label}: ${line}`);
    const countedAfter = roundTrips?.();
    const counted =
      countedBefore && countedAfter
        ? { roundTrips: countedAfter.main - countedBefore.main + countedAfter.claims - countedBefore.claims }
        : {};
    return { jobsPerSec: (count * 1000) / ms, ms, outcomes, cpuUs, ...counted } satisfies PhaseResult;
  } finally {
    await worker.close();
    await queue.obliterate({ force: true }).catch(() => {});
    await queue.close();
  }
}

/** Fences the disk floor records (they only rise, across rounds too). */
let diskFloorFence = 0;

/**
 * The disk part of a no-op rebuild alone (work dir, the holding mark and the look at others',
 * hash, the granted-fence mark, promote, the durable published-fence record, `current`, the
 * holding mark's removal: the same calls the pipeline makes), serially, in µs
 * per job: what the pipeline costs at concurrency 1 even if every Redis round trip were free. The
 * fence record is three fsyncs (its file, the legacy file for earlier workers, the directory:
 * published-fence.ts): what keeps a fence from being granted twice after Redis loses writes, so
 * any pipeline that keeps that promise pays it.
 */
async function diskFloorUs(bench: Bench, count: number): Promise<number> {
  const outputDir = path.join(bench.dir, "disk-floor");
  const started = performance.now();
  for (let i = 0; i < count; i++) {
    const workDir = workDirOf(outputDir, `floor-${crypto.randomBytes(4).toString("hex")}-a1`);
    await fsp.mkdir(workDir, { recursive: true });
    const fence = ++diskFloorFence;
    const token = `floor:${process.pid}:${crypto.randomBytes(16).toString("hex")}`;
    const holding = await markHolding(outputDir, fence, token, 60_000);
    await otherHolders(outputDir, { fence, token, holdMs: 60_000 });
    const hash = await hashDirectory(workDir);
    await markFenceGranted(outputDir, fence);
    await promoteBuild(outputDir, workDir, hash);
    await recordPublishedFence(outputDir, fence, hash);
    await pointCurrentAtRecord(outputDir, fence, hash);
    await holding.remove();
  }
  return ((performance.now() - started) * 1000) / count;
}

/**
 * Round trips a client makes: each command sent on its own, each pipeline or MULTI sent (one
 * write, one wait). Counted on instance methods of clients only the rebuild pipeline uses — the
 * BullMQ connection is another client — so BullMQ's own round trips are not in the count.
 */
function countRoundTrips(client: Redis): () => number {
  let count = 0;
  type Send = (command: unknown, stream?: unknown, node?: unknown) => unknown;
  const target = client as unknown as { sendCommand: Send; pipeline: Redis["pipeline"]; multi: Redis["multi"] };
  const send = target.sendCommand.bind(client) as Send;
  target.sendCommand = (command, stream, node) => {
    if (stream === undefined) count += 1; // a pipeline's commands come with its stream
    return send(command, stream, node);
  };
  for (const method of ["pipeline", "multi"] as const) {
    const open = (target[method] as (...args: unknown[]) => { exec: (...args: unknown[]) => unknown }).bind(client);
    (target as unknown as Record<string, unknown>)[method] = (...args: unknown[]) => {
      const batch = open(...args);
      const exec = batch.exec.bind(batch);
      batch.exec = (...execArgs: unknown[]) => {
        count += 1;
        return exec(...execArgs);
      };
      return batch;
    };
  }
  return () => count;
}

/** Round trips per job of the pipeline (fresh) and repeat sides at c1, on counting clients. */
async function roundTripsPerJob(bench: Bench): Promise<{ fresh: number; repeat: number }> {
  const main = createRedis(bench.server.url, "worker", "bench-rt-main");
  const claims = createRedis(`${bench.server.url}/1`, "claims", "bench-rt-claims");
  try {
    const counted = { ...bench, main, claims };
    const result: Record<"pipeline" | "repeat", number> = { pipeline: 0, repeat: 0 };
    for (const side of ["pipeline", "repeat"] as const) {
      const jobs = 300;
      await runPhase(counted, side, 1, jobs, `rt-warm-${side}`, bench.main);
      const mainCount = countRoundTrips(main);
      const claimsCount = countRoundTrips(claims);
      // The repeat side primes its outputs (one rebuild each) before the measured jobs: counted
      // separately below, so only the repeats are in the figure.
      const phase = await runPhase(counted, side, 1, jobs, `rt-${side}`, bench.main, () => ({
        main: mainCount(),
        claims: claimsCount(),
      }));
      result[side] = (phase.roundTrips ?? NaN) / jobs;
    }
    return { fresh: result.pipeline, repeat: result.repeat };
  } finally {
    await Promise.all([closeRedis(main), closeRedis(claims)]);
  }
}
type Medians = Record<Side, number>;

async function throughput(bench: Bench) {
  // Warm-up (JIT, script loading, first directories) for every side; not counted.
  for (const side of SIDES) await runPhase(bench, side, 16, 300, `warm-${side}`);

  const perRound: Record<string, number[]> = {};
  for (let round = 1; round <= ROUNDS; round++) {
    for (const concurrency of CONCURRENCIES) {
      // Rotate the order, so drift (CPU frequency, other load) hits every side alike.
      const order = SIDES.map((_, i) => SIDES[(i + round + concurrency) % SIDES.length]!);
      const result: Partial<Record<Side, PhaseResult>> = {};
      for (const side of order) {
        const label = `r${round}-c${concurrency}-${side}`;
        result[side] = await runPhase(bench, side, concurrency, JOBS[side][concurrency]!, label);
        (perRound[`${side}-c${concurrency}`] ??= []).push(result[side].jobsPerSec);
        (perRound[`${side}-c${concurrency}-node-cpu`] ??= []).push(result[side].cpuUs.node);
        (perRound[`${side}-c${concurrency}-redis-cpu`] ??= []).push(result[side].cpuUs.redis);
      }
      const raw = result.raw!.jobsPerSec;
      console.log(
        `round ${round} c${String(concurrency).padEnd(2)} (${order.join(", ")}): ` +
          SIDES.map((side) => {
            const { jobsPerSec, outcomes } = result[side]!;
            const counts =
              side === "raw"
                ? ""
                : ` {${Object.entries(outcomes)
                    .map(([k, v]) => `${k} ${v}`)
                    .join(", ")}}`;
            return `${side} ${jobsPerSec.toFixed(0)} jobs/s${side === "raw" ? "" : ` (${(jobsPerSec / raw).toFixed(3)})`}${counts}`;
          }).join("; "),
      );
      const expected: Partial<Record<Side, string>> = { pipeline: "rebuilt", repeat: "skipped already-rebuilt" };
      for (const [side, status] of Object.entries(expected) as [Side, string][]) {
        const other = JOBS[side][concurrency]! - (result[side]!.outcomes[status] ?? 0);
        if (other > 0) console.log(`  WARNING: ${other} ${side} jobs ended other than ${status} (see counts)`);
      }
    }
    (perRound.diskUs ??= []).push(await diskFloorUs(bench, JOBS.pipeline[1]!));
  }
  const medians: Record<number, Medians> = {};
  for (const concurrency of CONCURRENCIES) {
    const m = Object.fromEntries(SIDES.map((side) => [side, median(perRound[`${side}-c${concurrency}`]!)])) as Medians;
    medians[concurrency] = m;
    console.log(
      `c${String(concurrency).padEnd(2)} medians: ` +
        SIDES.map(
          (side) => `${side} ${m[side].toFixed(0)} jobs/s${side === "raw" ? "" : ` (${(m[side] / m.raw).toFixed(3)})`}`,
        ).join(", "),
    );
  }
  // CPU per job (medians over the rounds), to bound what the repeat could reach against the floor.
  const cpu: Record<number, Record<Side, { node: number; redis: number }>> = {};
  for (const concurrency of CONCURRENCIES) {
    cpu[concurrency] = Object.fromEntries(
      SIDES.map((side) => [
        side,
        {
          node: median(perRound[`${side}-c${concurrency}-node-cpu`]!),
          redis: median(perRound[`${side}-c${concurrency}-redis-cpu`]!),
        },
      ]),
    ) as Record<Side, { node: number; redis: number }>;
    console.log(
      `c${String(concurrency).padEnd(2)} CPU per job (µs, this process + Redis main thread): ` +
        SIDES.map(
          (side) => `${side} ${cpu[concurrency]![side].node.toFixed(0)} + ${cpu[concurrency]![side].redis.toFixed(0)}`,
        ).join(", "),
    );
  }
  const diskUs = median(perRound.diskUs!);
  const rawUs = 1e6 / medians[1]!.raw;
  console.log(
    `disk part of a fresh no-op rebuild alone (work dir, hash, promote, fence record, current; serial): median ${diskUs.toFixed(0)} µs/job ` +
      `vs raw c1 ${rawUs.toFixed(0)} µs/job → c1 ratio ceiling of "pipeline" with free Redis ${(rawUs / (rawUs + diskUs)).toFixed(3)}`,
  );
  return { medians, diskUs, cpu };
}

// --- kill → resume ----------------------------------------------------------------------------

interface WorkerProcess {
  child: ChildProcess;
  id: string;
  output(): string;
}

async function startWorkerProcess(bench: Bench, env: NodeJS.ProcessEnv): Promise<WorkerProcess> {
  // As `npm start` runs it: its bundle (lib/launcher/bundle.mjs).
  const child = spawn(process.execPath, await entryArguments("worker/index.ts"), {
    env,
    stdio: ["ignore", "pipe", "pipe"],
  });
  bench.children.add(child);
  child.once("exit", () => bench.children.delete(child));
  let output = "";
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`worker not ready within 30 s:\n${output.slice(-2000)}`)), 30_000);
    const onData = (chunk: Buffer) => {
      output += chunk.toString();
      const ready = /\[worker ([^\]]+)\] ready: /.exec(output);
      if (ready) {
        clearTimeout(timer);
        resolve({ child, id: ready[1]!, output: () => output });
      }
    };
    child.stdout!.on("data", onData);
    child.stderr!.on("data", onData);
    child.once("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`worker exited (${code}) before it was ready:\n${output.slice(-2000)}`));
    });
  });
}

/** Child processes of `pid` (a step's `sh`), read from /proc before the worker is killed. */
function childPidsOf(pid: number): number[] {
  const found: number[] = [];
  for (const entry of fs.readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = fs.readFileSync(`/proc/${entry}/stat`, "utf8");
      if (Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]) === pid) found.push(Number(entry));
    } catch {
      // exited while reading
    }
  }
  return found;
}

async function waitForRun(
  main: Redis,
  keys: RedisKeys,
  predicate: (run: RunRecord) => boolean,
  timeoutMs: number,
  what: string,
): Promise<RunRecord> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const ids = await main.zrange(keys.runIndex(), "0", "-1");
    const runs = await Promise.all(ids.map((id) => readRun(main, keys, id)));
    const match = runs.find((run): run is RunRecord => run !== null && predicate(run));
    if (match) return match;
    await sleep(25);
  }
  throw new Error(`no ${what} within ${timeoutMs} ms`);
}

async function killToResume(bench: Bench): Promise<number[]> {
  const prefix = `bench-kill-${crypto.randomBytes(3).toString("hex")}`;
  const keys = redisKeys(prefix);
  const configFile = path.join(bench.dir, "kill.yaml");
  fs.writeFileSync(
    configFile,
    stringify({
      rebuilds: {
        slow: {
          output: "kill-out/slow",
          steps: [{ name: "work", run: ["sh", "-c", 'sleep 3; echo x > "$CLAIMWATCH_WORK/x"'], killGrace: "1s" }],
        },
      },
    }),
  );
  // The workers read the file; the trigger here only needs the rebuild's name and job options.
  const parsed = parseDefinitions(
    { rebuilds: { slow: { output: "kill-out/slow", steps: [{ name: "work", run: ["true"] }] } } },
    configFile,
  );
  if (!parsed.ok) throw parsed.error;
  const definitions = parsed.definitions;
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    REDIS_URL: bench.server.url,
    CLAIMWATCH_CONFIG: configFile,
    CLAIMWATCH_DATA_DIR: path.join(bench.dir, "kill-data"),
    CLAIMWATCH_KEY_PREFIX: prefix,
  };
  delete env.CLAIMS_REDIS_URL;
  delete env.CLAIMWATCH_WORKER_CONCURRENCY;
  const queue = new Queue(REBUILD_QUEUE, { connection: bench.main, prefix: queuePrefix(keys) });
  const workers = await Promise.all([startWorkerProcess(bench, env), startWorkerProcess(bench, env)]);
  const seconds: number[] = [];
  try {
    for (let kill = 1; kill <= KILLS; kill++) {
      const triggered = await triggerRebuild(queue, bench.main, keys, definitions, "slow", {
        version: `kill-${kill}`,
      });
      if (triggered.status !== "queued") throw new Error(`trigger: ${JSON.stringify(triggered)}`);
      const jobId = triggered.jobId;
      const first = await waitForRun(
        bench.main,
        keys,
        (run) => run.jobId === jobId && run.status === "running",
        15_000,
        `running record of ${jobId}`,
      );
      const victim = workers.find((w) => w.id === first.workerId);
      if (!victim) throw new Error(`run ${first.id} is held by unknown worker ${first.workerId}`);
      const orphans = childPidsOf(victim.child.pid!);
      const exited = new Promise((resolve) => victim.child.once("exit", resolve));
      const killedAt = Date.now();
      victim.child.kill("SIGKILL");
      // The step's process group (`sh`, `sleep`) would finish on its own; stop it as a crash would.
      for (const pid of orphans) {
        for (const target of [-pid, pid]) {
          try {
            process.kill(target, "SIGKILL");
          } catch {
            // not a group leader, or already gone
          }
        }
      }
      await exited;
      const resumed = await waitForRun(
        bench.main,
        keys,
        (run) => run.jobId === jobId && run.attempt > first.attempt && run.startedAt !== null,
        30_000,
        `resumed attempt of ${jobId}`,
      );
      const s = (resumed.startedAt! - killedAt) / 1000;
      seconds.push(s);
      console.log(
        `kill ${kill}: SIGKILL worker ${victim.id} (run ${first.id}); attempt ${resumed.attempt} running on ` +
          `${resumed.workerId} after ${s.toFixed(2)} s${resumed.workerId === victim.id ? " (SAME WORKER?)" : ""}`,
      );
      // Replace the killed worker while the resumed attempt finishes; both must be idle again.
      const [replacement] = await Promise.all([
        startWorkerProcess(bench, env),
        waitForRun(
          bench.main,
          keys,
          (run) => run.id === resumed.id && run.status !== "running",
          30_000,
          `end of ${resumed.id}`,
        ).then((run) => {
          if (run.status !== "rebuilt") console.log(`  resumed run ended ${run.status}: ${run.reason}`);
        }),
      ]);
      workers[workers.indexOf(victim)] = replacement;
    }
  } finally {
    await queue.close();
    await Promise.all(workers.map((w) => stopChild(w.child, "SIGTERM", 20_000)));
  }
  return seconds;
}

/** BENCH_ONLY: the named sides alone, ROUNDS rounds at each concurrency (for a CPU profile of one side). */
async function onlySides(bench: Bench, sides: readonly Side[]): Promise<void> {
  for (const side of sides) await runPhase(bench, side, 16, 300, `warm-${side}`);
  const perSide: Record<string, number[]> = {};
  for (let round = 1; round <= ROUNDS; round++) {
    for (const concurrency of CONCURRENCIES) {
      for (const side of sides) {
        const { jobsPerSec } = await runPhase(bench, side, concurrency, JOBS[side][concurrency]!, `only-${side}`);
        (perSide[`${side}_c${concurrency}_jps`] ??= []).push(jobsPerSec);
        console.log(`round ${round} c${concurrency} ${side}: ${jobsPerSec.toFixed(0)} jobs/s`);
      }
    }
  }
  console.log(
    `RESULT ${Object.entries(perSide)
      .map(([key, values]) => `${key}=${median(values).toFixed(0)}`)
      .join(" ")}`,
  );
}

async function stopChild(child: ChildProcess, signal: NodeJS.Signals, graceMs: number): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((resolve) => child.once("exit", resolve));
  child.kill(signal);
  const timer = setTimeout(() => child.kill("SIGKILL"), graceMs);
  await exited;
  clearTimeout(timer);
}

async function main(): Promise<void> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "claimwatch-bench-worker-"));
  const server = await startRedisServer({
    dir: path.join(dir, "redis"),
    extraArgs: AOF ? [] : ["--appendonly", "no", "--save", ""],
  });
  const bench: Bench = {
    dir,
    server,
    main: createRedis(server.url, "worker", "bench-main"),
    claims: createRedis(`${server.url}/1`, "claims", "bench-claims"),
    definitions: noOpDefinitions(dir),
    children: new Set(),
  };
  let cleaning: Promise<void> | undefined;
  const cleanUp = () =>
    (cleaning ??= (async () => {
      for (const child of bench.children) child.kill("SIGKILL");
      await Promise.all([closeRedis(bench.main), closeRedis(bench.claims)]);
      await server.stop();
      fs.rmSync(dir, { recursive: true, force: true });
    })());
  process.once("SIGINT", () => void cleanUp().finally(() => process.exit(130)));
  process.once("SIGTERM", () => void cleanUp().finally(() => process.exit(143)));
  try {
    console.log(
      `redis-server pid ${server.pid} on ${server.url} (${AOF ? "AOF everysec" : "no persistence"}); ` +
        `${ROUNDS} rounds × {${SIDES.join(", ")}} × c{${CONCURRENCIES.join(", ")}} ` +
        `(jobs at c1 / c16: ${SIDES.map((side) => `${side} ${JOBS[side][1]} / ${JOBS[side][16]}`).join(", ")}), ` +
        `no-op rebuilds over ${OUTPUTS} outputs; then ${KILLS} kill→resume with the default worker settings ` +
        `(lockDuration ${DEFAULT_WORKER_OPTIONS.lockDuration} ms, stalledInterval ${DEFAULT_WORKER_OPTIONS.stalledInterval} ms)`,
    );
    const started = performance.now();
    if (ONLY.length > 0) return await onlySides(bench, ONLY);
    const { medians, diskUs, cpu } = await throughput(bench);
    const rt = await roundTripsPerJob(bench);
    console.log(
      `round trips per job beyond BullMQ's (the pipeline's own clients, c1): fresh ${rt.fresh.toFixed(2)}, repeat ${rt.repeat.toFixed(2)}`,
    );
    const kills = KILLS > 0 ? await killToResume(bench) : [];
    const seconds = (values: number[], pick: (v: number[]) => number) =>
      values.length ? pick(values).toFixed(2) : "n/a";
    const worst = seconds(kills, (v) => Math.max(...v));
    console.log(
      `kill→resume: median ${seconds(kills, median)} s, max ${worst} s (goal ≤ ${KILL_GOAL_S} s); ` +
        `bench took ${((performance.now() - started) / 1000).toFixed(0)} s`,
    );
    const ratio = (side: Side, concurrency: number) =>
      (medians[concurrency]![side] / medians[concurrency]!.raw).toFixed(3);
    const vsFloor = (side: Side, concurrency: number) =>
      (medians[concurrency]![side] / medians[concurrency]!.floor).toFixed(3);
    // A fresh no-op rebuild against what the least of it costs: one GET's job time plus the
    // measured disk part (work dir, hash, promote, current), at c1.
    const floorPlusDiskUs = 1e6 / medians[1]!.floor + diskUs;
    const freshVsFloor = medians[1]!.pipeline / (1e6 / floorPlusDiskUs);
    // What the repeat could reach if its own JavaScript cost nothing, only its extra Redis work
    // left (its record write: RUN_BEGIN's skip record, index entries, counters, event). At c16 the
    // two processes run on two cores, so a job rate is at most 1 / the busier one's CPU per job:
    // the ceiling is that of the floor over that of the floor plus the extra on Redis. At c1
    // (latency-bound) the extra adds to each job's time.
    const extraRedisUs = (c: number) => Math.max(0, cpu[c]!.repeat.redis - cpu[c]!.floor.redis);
    const floorCpu = cpu[16]!.floor;
    const repeatCeilingC16 =
      Math.max(floorCpu.node, floorCpu.redis) / Math.max(floorCpu.node, floorCpu.redis + extraRedisUs(16));
    const floorJobUs = 1e6 / medians[1]!.floor;
    const repeatCeilingC1 = floorJobUs / (floorJobUs + extraRedisUs(1));
    console.log(
      `repeat vs the one-GET floor if the repeat's JavaScript were free (only its extra Redis work left): ` +
        `c1 ≤ ${repeatCeilingC1.toFixed(3)} (floor job ${floorJobUs.toFixed(0)} µs + ${extraRedisUs(1).toFixed(0)} µs), ` +
        `c16 ≤ ${repeatCeilingC16.toFixed(3)} (floor CPU per job ${floorCpu.node.toFixed(0)} µs here, ${floorCpu.redis.toFixed(0)} µs + ${extraRedisUs(16).toFixed(0)} µs on Redis)`,
    );
    console.log(
      `RESULT pipeline_vs_raw_c1=${ratio("pipeline", 1)} pipeline_vs_raw_c16=${ratio("pipeline", 16)} ` +
        `kill_to_resume_s=${worst} kill_to_resume_median_s=${seconds(kills, median)} ` +
        `repeat_vs_raw_c1=${ratio("repeat", 1)} repeat_vs_raw_c16=${ratio("repeat", 16)} ` +
        `naive_vs_raw_c1=${ratio("naive", 1)} naive_vs_raw_c16=${ratio("naive", 16)} ` +
        `floor_vs_raw_c1=${ratio("floor", 1)} floor_vs_raw_c16=${ratio("floor", 16)} ` +
        `raw_c1_jps=${medians[1]!.raw.toFixed(0)} raw_c16_jps=${medians[16]!.raw.toFixed(0)} disk_floor_us=${diskUs.toFixed(0)} ` +
        `rt_fresh=${rt.fresh.toFixed(2)} rt_repeat=${rt.repeat.toFixed(2)} ` +
        `repeat_vs_floor_c1=${vsFloor("repeat", 1)} repeat_vs_floor_c16=${vsFloor("repeat", 16)} ` +
        `fresh_vs_floor_c1=${freshVsFloor.toFixed(3)} ` +
        `repeat_redis_cpu_us=${cpu[16]!.repeat.redis.toFixed(0)} floor_redis_cpu_us=${cpu[16]!.floor.redis.toFixed(0)} ` +
        `repeat_node_cpu_us=${cpu[16]!.repeat.node.toFixed(0)} floor_node_cpu_us=${cpu[16]!.floor.node.toFixed(0)} ` +
        `repeat_ceiling_c1=${repeatCeilingC1.toFixed(3)} repeat_ceiling_c16=${repeatCeilingC16.toFixed(3)}`,
    );
  } finally {
    await cleanUp();
  }
}

await main();
