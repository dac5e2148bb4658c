/**
 * Soak test (`npm run soak -- --seconds 300 --workers 3`; `--seconds 45 --quick` inside
 * `npm test`): a stream of triggers with deliberate duplicates over three rebuilds (one with
 * tenants, one triggered without a version: its jobs read the version from an input file the
 * soak rewrites, and record themselves running before that read ends), against real worker processes that are SIGKILLed, SIGSTOPped past their claim TTL,
 * deployed (SIGTERM) and cut off by Redis restarts (AOF, same port and data); one publisher is held
 * inside its swap of `current` while a newer fence publishes (`slow-swap`). The rebuild steps
 * journal every write to files outside Redis; an independent checker (scripts/soak/checker.ts)
 * reads the journals, the soak's event log and the outputs afterwards.
 *
 * Last line: RESULT overlaps=0 lost=0 corrupt=0 stale_left=0 pointer_wrong=0 max_resume_s=<s>
 * triggers=<n> kills=<n> pauses=<n> stuck_running=0 escaped=0 reissued=0 rolled_back=0 republished=0 dropped=0 miscounted=0
 * hashed_triggers=<n> early_begins=<n> reads_cut=<n> unrecorded_publishes=0 refused_records=<n> left_behind=0 hung_stops=0. Exit 0 when every must-be-zero figure is zero (and some
 * attempt took the early begin when any trigger was sent without a version), 1 when not, 2 when the soak itself could not run (the RESULT line then has -1 for what is unknown).
 *
 * Options: --seconds N (300; 45 with --quick), --workers K (3), --quick (shorter drain),
 * --seed S (random), --keep (keep the temp dir; it is always kept when a figure is non-zero),
 * --claims separate (the claims on their own redis-server, which is the one `redis-crash` kills),
 * --claims-persistence rdb (that server keeps RDB snapshots only: a crash loses seconds of fences
 * and pointers), --retention-builds N (workers prune old builds while runs reproduce them),
 * --input-faults P (each step reads an input first; each read fails with EIO — exit 75, declared
 * transient — with probability P: retried, never a lost request), --clock-skews L (comma-separated
 * wall-clock offsets given to the workers in turn as they start, libfaketime: "0,-20s,+20s" by
 * default, so hosts' clocks disagree by 40 s; "0" for real clocks only; the steps keep the real
 * clock, as the journals are the checker's instrument), --redis sentinel (the main Redis, claims
 * included, is a Sentinel group: a primary, two replicas with `min-replicas-to-write 2`, three
 * sentinels; `redis` is a forced failover, `redis-crash` a SIGKILLed primary; triggers count once
 * both replicas have them, CLAIMWATCH_TRIGGER_REPLICAS=2).
 * Every process is started and stopped by PID here; port 6379 is never used.
 */
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { parseArgs } from "node:util";
import { Queue } from "bullmq";
import type { Redis } from "ioredis";
import { listClaims } from "../lib/claims";
import { loadDefinitions, shutdownWaitMs, STOP_AFTER_JOBS_MS } from "../lib/rebuilds/definitions";
import { queuePrefix, REBUILD_QUEUE } from "../lib/rebuilds/queue";
import { closeRedis, createRedis } from "../lib/redis/client";
import { redisKeys } from "../lib/redis/keys";
import { withDatabase } from "../lib/redis/url";
import {
  EventLog,
  prepareDirs,
  seededRandom,
  sleep,
  SoakRedis,
  SoakSentinelRedis,
  type SoakRedisServer,
  withTimeout,
  WorkerPool,
  type SoakClaimRef,
  type SoakDirs,
} from "./soak/bed";
import { mountSmallDisk } from "./faults/small-disk";
import { chaosPlan, DISK_FILLER, runChaos } from "./soak/chaos";
import { runChecker, readEvents, type Figures } from "./soak/checker";
import { runTriggerStream } from "./soak/triggers";
import { EscapeSampler } from "./soak/escapees";
import { PublishWatcher } from "./soak/watcher";

const USAGE =
  "usage: soak [--seconds N≥10] [--workers K≥2] [--quick] [--seed S] [--keep]\n" +
  "            [--claims shared|separate] [--claims-persistence aof|rdb (separate only)] [--retention-builds N≥0]\n" +
  "            [--input-faults P (0≤P<1: a step's input read fails with EIO with probability P)]\n" +
  "            [--clock-skews 0,-20s,+20s (the workers' wall clocks in turn, libfaketime; 0: real)]\n" +
  "            [--redis single|sentinel (a primary, two replicas and three sentinels: restarts are failovers; claims shared only)]\n";
/** Bad arguments: one line naming what is wrong, then the usage; exit 2. */
function usageError(problem: string): never {
  process.stderr.write(`soak: ${problem}\n${USAGE}`);
  process.exit(2);
}

const { values: args } = (() => {
  try {
    return parseArgs({
      options: {
        seconds: { type: "string" },
        workers: { type: "string", default: "3" },
        quick: { type: "boolean", default: false },
        seed: { type: "string" },
        keep: { type: "boolean", default: false },
        claims: { type: "string", default: "shared" },
        "claims-persistence": { type: "string", default: "aof" },
        "retention-builds": { type: "string" },
        "input-faults": { type: "string" },
        "clock-skews": { type: "string", default: "0,-20s,+20s" },
        redis: { type: "string", default: "single" },
        help: { type: "boolean", default: false },
      },
    });
  } catch (error) {
    return usageError(error instanceof Error ? error.message : String(error));
  }
})();
if (args.help) {
  process.stdout.write(USAGE);
  process.exit(0);
}
const inputFaults = args["input-faults"] === undefined ? 0 : Number(args["input-faults"]);
const separateClaims = args.claims === "separate";
const sentinel = args.redis === "sentinel";
const claimsPersistence = args["claims-persistence"];
const retentionBuilds = args["retention-builds"] === undefined ? undefined : Number(args["retention-builds"]);
const seconds = Number(args.seconds ?? (args.quick ? 45 : 300));
const clockSkews = (args["clock-skews"] ?? "0").split(",").map((skew) => skew.trim());
const workerCount = Number(args.workers);
const seed = args.seed !== undefined ? Number(args.seed) : Math.floor(Math.random() * 2 ** 31);
const argumentProblem: [boolean, string][] = [
  [!Number.isFinite(seconds) || seconds < 10, `--seconds must be a number ≥ 10 (got ${args.seconds})`],
  [!Number.isInteger(workerCount) || workerCount < 2, `--workers must be a whole number ≥ 2 (got ${args.workers})`],
  [!Number.isFinite(seed), `--seed must be a number (got ${args.seed})`],
  [!["shared", "separate"].includes(args.claims ?? ""), `--claims must be shared or separate (got ${args.claims})`],
  [!["single", "sentinel"].includes(args.redis ?? ""), `--redis must be single or sentinel (got ${args.redis})`],
  [sentinel && separateClaims, "--redis sentinel runs with --claims shared only"],
  [
    !["aof", "rdb"].includes(claimsPersistence ?? ""),
    `--claims-persistence must be aof or rdb (got ${claimsPersistence})`,
  ],
  [claimsPersistence === "rdb" && !separateClaims, "--claims-persistence rdb needs --claims separate"],
  [
    retentionBuilds !== undefined && (!Number.isInteger(retentionBuilds) || retentionBuilds < 0),
    `--retention-builds must be a whole number ≥ 0 (got ${args["retention-builds"]})`,
  ],
  [
    !(inputFaults >= 0 && inputFaults < 1),
    `--input-faults must be a probability, 0 ≤ P < 1 (got ${args["input-faults"]})`,
  ],
  [
    !clockSkews.every((skew) => /^(0|[+-]\d+[smh])$/.test(skew)),
    `--clock-skews must be a comma-separated list of 0 or ±N[s|m|h] (got ${args["clock-skews"]})`,
  ],
];
for (const [wrong, problem] of argumentProblem) if (wrong) usageError(problem);
/** Longest wait for the queue to empty and the claims to go after the chaos phase. */
// A failover late in a Sentinel run stops writes for up to ~20 s, and every worker then waits a
// heartbeat TTL of good beats before it closes others' abandoned records (BEAT_STREAK).
const DRAIN_MS = args.quick ? (sentinel ? 75_000 : 40_000) : 120_000;

const startedAt = Date.now();
const say = (line: string) => process.stdout.write(`${line}\n`);
const elapsed = () => `${((Date.now() - startedAt) / 1000).toFixed(1)}s`;

interface Soak {
  dirs: SoakDirs;
  events: EventLog;
  redis: SoakRedisServer | null;
  /** A separate claims Redis (`--claims separate`), or null when claims share the main one. */
  claimsRedis: SoakRedis | null;
  pool: WorkerPool | null;
  clients: Redis[];
  queue: Queue | null;
  watcher: PublishWatcher | null;
  sampler: EscapeSampler | null;
  /** The key prefix: steps (and anything they start) carry it in their environment. */
  prefix: string;
}

const soak: Soak = {
  dirs: prepareDirs(fs.mkdtempSync(path.join(os.tmpdir(), "claimwatch-soak-")), {
    ...(retentionBuilds !== undefined ? { retentionBuilds } : {}),
    inputFaults,
  }),
  events: null as unknown as EventLog,
  redis: null,
  claimsRedis: null,
  pool: null,
  clients: [],
  queue: null,
  watcher: null,
  sampler: null,
  prefix: `soak${process.pid}`,
};
soak.events = new EventLog(path.join(soak.dirs.root, "events.jsonl"));

/**
 * The outputs on a small disk of their own (a loop-mounted ext4, else a tmpfs; root only), so
 * that `disk-full` fills their disk and no other: the journals, logs, Redis data and the
 * machine's own disk stay out of it.
 */
const OUTPUTS_DISK_MIB = 128;
const outputsDisk = mountSmallDisk(soak.dirs.outputs, OUTPUTS_DISK_MIB * 1024 * 1024);
if (typeof outputsDisk === "string") soak.events.record("chaos-skip", { action: "disk-full", why: outputsDisk });
else soak.events.record("outputs-disk", { filesystem: outputsDisk.kind, mib: OUTPUTS_DISK_MIB });

let outputsMounted = typeof outputsDisk !== "string";
/**
 * Unmounts the outputs' disk, once; with `keep`, its contents (not the disk filler) are copied to
 * the kept directory first. Also on every other way out (an uncaught error, a second signal):
 * a mount left behind would hold its memory or loop device until a reboot.
 */
function unmountOutputs(keep: boolean): void {
  if (!outputsMounted || typeof outputsDisk === "string") return;
  outputsMounted = false;
  fs.rmSync(path.join(soak.dirs.outputs, DISK_FILLER), { force: true });
  const copy = `${soak.dirs.outputs}.kept`;
  if (keep) spawnSync("cp", ["-a", soak.dirs.outputs, copy], { stdio: "ignore" });
  outputsDisk.unmount();
  if (keep && fs.existsSync(copy)) {
    fs.rmSync(soak.dirs.outputs, { recursive: true, force: true });
    fs.renameSync(copy, soak.dirs.outputs);
  }
}

let cleaningUp: Promise<string[]> | null = null;
/** Stops everything this soak started, by PID; returns the PIDs still alive afterwards. */
function cleanUp(): Promise<string[]> {
  cleaningUp ??= (async () => {
    await soak.watcher?.stop().catch(() => {});
    await soak.sampler?.stop().catch(() => {});
    if (soak.pool)
      await Promise.race([Promise.all(soak.pool.all.map((w) => soak.pool!.stop(w, 10_000))), sleep(15_000)]);
    await soak.pool?.killAll();
    killStepProcesses(soak.dirs, soak.events);
    await soak.queue?.close().catch(() => {});
    await Promise.all(soak.clients.map((c) => closeRedis(c)));
    const redisPids = [...(soak.redis?.pids() ?? []), ...(soak.claimsRedis?.pids() ?? [])];
    await soak.redis?.stop();
    await soak.claimsRedis?.stop();
    await sleep(200);
    // Every PID this soak started (workers, each redis-server, each step), checked by /proc.
    const started = soak.events.events;
    const left: string[] = [];
    for (const w of soak.pool?.all ?? []) if (isAlive(w.pid)) left.push(`worker ${w.pid}`);
    for (const pid of new Set([
      ...started.filter((e) => e.kind === "redis-up").map((e) => Number(e.pid)),
      ...redisPids,
    ]))
      if (isAlive(pid)) left.push(`redis-server ${pid}`);
    for (const pid of stepPids(soak.dirs)) if (isAlive(pid)) left.push(`step ${pid}`);
    for (const pid of soakProcessPids(soak.prefix)) left.push(`escaped step process ${pid}`);
    return left;
  })();
  return cleaningUp;
}

process.on("exit", () => unmountOutputs(true));
for (const signal of ["SIGINT", "SIGTERM"] as const) {
  process.once(signal, () => {
    say(`soak: ${signal}, cleaning up`);
    // A second one: out at once (the exit handler still unmounts the outputs).
    process.once(signal, () => process.exit(2));
    void cleanUp().then((left) => {
      unmountOutputs(true);
      if (left.length) say(`soak: still running: ${left.join(", ")}`);
      say(`soak: kept ${soak.dirs.root}`);
      say(resultLine(null));
      process.exit(2);
    });
  });
}

async function main(): Promise<Figures> {
  const { dirs, events } = soak;
  const mode = separateClaims
    ? `claims on a separate Redis (${claimsPersistence === "rdb" ? "RDB snapshots only" : "AOF everysec"})`
    : sentinel
      ? "a Sentinel group (primary, two replicas, three sentinels; restarts are failovers), claims on it too"
      : "claims on the main Redis (AOF everysec)";
  say(
    `soak: ${seconds} s, ${workerCount} workers, seed ${seed}${args.quick ? ", quick" : ""}, ${mode}` +
      `${retentionBuilds !== undefined ? `, retention.builds ${retentionBuilds}` : ""}` +
      `${inputFaults > 0 ? `, input reads fail with EIO at p=${inputFaults}` : ""}, dir ${dirs.root}`,
  );
  let redis: SoakRedisServer;
  if (sentinel) {
    redis = soak.redis = await SoakSentinelRedis.start(dirs.redis, events);
  } else {
    const single = await SoakRedis.start(dirs.redis);
    redis = soak.redis = single;
    events.record("redis-up", { pid: single.pid, port: single.port, first: true, role: "main" });
  }
  if (separateClaims) {
    // RDB-only: a crash loses every write since the last snapshot (at most ~3 s here).
    const persistence = claimsPersistence === "rdb" ? ["--appendonly", "no", "--save", "3 1"] : [];
    soak.claimsRedis = await SoakRedis.start(`${dirs.redis}-claims`, "claims", persistence);
    events.record("redis-up", { pid: soak.claimsRedis.pid, port: soak.claimsRedis.port, first: true, role: "claims" });
  }
  const claimsUrl = soak.claimsRedis ? soak.claimsRedis.url : withDatabase(redis.url, 1);
  const loaded = loadDefinitions(dirs.config);
  if (!loaded.ok) throw loaded.error;
  const definitions = loaded.definitions;
  const prefix = soak.prefix;
  const keys = redisKeys(prefix);
  const main = createRedis(redis.url, "worker", "soak-main");
  const claims = createRedis(claimsUrl, "worker", "soak-claims");
  const watchClaims = createRedis(claimsUrl, "probe", "soak-watch");
  soak.clients.push(main, claims, watchClaims);
  const queue = new Queue(REBUILD_QUEUE, { connection: main, prefix: queuePrefix(keys) });
  queue.on("error", () => {}); // Redis restarts: callers see failures through their commands
  soak.queue = queue;
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    REDIS_URL: redis.url,
    CLAIMWATCH_CONFIG: dirs.config,
    CLAIMWATCH_DATA_DIR: path.join(dirs.root, ".data"),
    CLAIMWATCH_KEY_PREFIX: prefix,
    CLAIMWATCH_WORKER_CONCURRENCY: "4",
    // Every job that reads inputs (the hashed rebuild's) records itself running before the read
    // ends and adds its version after: the soak's faults then land between the two writes too.
    CLAIMWATCH_INPUTS_VISIBLE_AFTER_MS: "0",
  };
  if (sentinel) env.CLAIMWATCH_TRIGGER_REPLICAS = String(SoakSentinelRedis.REPLICAS);
  if (soak.claimsRedis) env.CLAIMS_REDIS_URL = soak.claimsRedis.url;
  else delete env.CLAIMS_REDIS_URL;
  const pool = new WorkerPool(env, dirs.logs, events, clockSkews, shutdownWaitMs(definitions) + STOP_AFTER_JOBS_MS);
  soak.pool = pool;
  await Promise.all(Array.from({ length: workerCount }, () => pool.start()));
  say(
    `soak: redis-server pid(s) ${redis.pids().join(", ")} at ${redis.url}; workers ${pool.all.map((w) => w.pid).join(", ")} ready (${elapsed()})`,
  );

  soak.watcher = new PublishWatcher(watchClaims, keys, definitions, events);
  soak.watcher.start();
  soak.sampler = new EscapeSampler(main, keys, prefix, pool, events, () =>
    events.events.filter((e) => e.kind === "pause").map((e) => ({ pid: Number(e.pid), t: e.t })),
  );
  soak.sampler.start();

  // --- the soak: triggers and chaos, side by side ----------------------------------------------
  const random = seededRandom(seed);
  const phaseStart = Date.now();
  const until = phaseStart + seconds * 1000;
  const plan = chaosPlan(phaseStart, seconds * 1000, random);
  const redeliveries: Promise<void>[] = [];
  const progress = setInterval(() => {
    const counts = (kind: string) => events.events.filter((e) => e.kind === kind).length;
    say(
      `soak: ${elapsed()} triggers ${counts("trigger")}, kills ${counts("kill")}, pauses ${counts("pause")}, ` +
        `deploys ${counts("deploy")}, Redis restarts ${counts("redis-stop")}, Redis crashes ${counts("redis-crash")}, ` +
        `force releases ${counts("force-release")}${sentinel ? `, failovers ${counts("redis-failover")}` : ""}`,
    );
  }, 15_000);
  let newVersion: ((ref: SoakClaimRef, why: string) => Promise<void>) | undefined;
  try {
    await Promise.all([
      runTriggerStream({
        queue,
        main,
        keys,
        definitions,
        events,
        random,
        until,
        gapMs: [250, 800],
        inputRoot: dirs.root,
        ...(sentinel ? { replicas: SoakSentinelRedis.REPLICAS } : {}),
        expose: (fn) => (newVersion = fn),
      }),
      runChaos(
        {
          pool,
          redis,
          events,
          main,
          claims,
          keys,
          queue,
          random,
          workers: workerCount,
          startedAt: phaseStart,
          until,
          redeliveries,
          journalDir: dirs.journal,
          ...(typeof outputsDisk !== "string" ? { fullableDisk: dirs.outputs } : {}),
          ...(soak.claimsRedis ? { claimsRedis: soak.claimsRedis } : {}),
          newVersion: (ref, why) => newVersion?.(ref, why) ?? Promise.resolve(),
          definitions,
        },
        plan,
      ),
    ]);
  } finally {
    clearInterval(progress);
  }
  events.record("chaos-end");
  say(`soak: chaos and triggers stopped (${elapsed()}); draining`);

  // --- drain: the queue empties, claims go, steps end --------------------------------------
  const drainUntil = Date.now() + DRAIN_MS;
  let drained = false;
  let last = "";
  while (Date.now() < drainUntil) {
    for (let missing = workerCount - pool.live().length; missing > 0; missing--) {
      await pool.start().catch((error: unknown) => events.record("worker-start-failed", { error: String(error) }));
    }
    try {
      const counts = await withTimeout(
        queue.getJobCounts("waiting", "active", "delayed", "prioritized", "waiting-children"),
        3_000,
        "job counts",
      );
      const open = Object.values(counts).reduce((a, b) => a + b, 0);
      const held = (await withTimeout(listClaims(claims, keys), 3_000, "claims")).claims.length;
      const steps = stepPids(dirs).filter(isAlive).length;
      // Records in flight end too: closed by their attempt, the next attempt, or a live worker's
      // sweep once their dead worker's heartbeat expired.
      const inFlight = await withTimeout(
        Promise.all((["queued", "running"] as const).map((status) => main.zcard(keys.runIndex({ status })))).then(
          ([queued, running]) => queued! + running!,
        ),
        3_000,
        "records in flight",
      );
      last = `jobs ${JSON.stringify(counts)}, claims ${held}, step processes ${steps}, records in flight ${inFlight}`;
      if (open === 0 && held === 0 && steps === 0 && inFlight === 0) {
        drained = true;
        break;
      }
    } catch (error) {
      last = String(error);
    }
    await sleep(500);
  }
  events.record(drained ? "drained" : "drain-timeout", { state: last });
  say(`soak: ${drained ? "drained" : `NOT drained within ${DRAIN_MS / 1000} s: ${last}`} (${elapsed()})`);

  await Promise.race([Promise.all(redeliveries), sleep(5_000)]);
  // Stop the workers (a deploy with nothing left to hand back), then any step left running.
  await Promise.all(pool.all.map((w) => pool.stop(w)));
  killStepProcesses(dirs, events);
  await soak.watcher.stop();
  soak.watcher = null;
  await soak.sampler.stop();
  say(`soak: escape sampler: ${soak.sampler.samples} samples of /proc, ${soak.sampler.escaped} escaped process(es)`);
  soak.sampler = null;

  say(`soak: checking (${elapsed()})`);
  const report = await runChecker({ dirs, main, claims, keys, definitions, queue });
  for (const line of report.lines) say(line);
  return report.figures;
}

function resultLine(f: Figures | null): string {
  const n = (v: number | null | undefined) => (v === null || v === undefined ? "-1" : String(v));
  return (
    `RESULT overlaps=${n(f?.overlaps)} lost=${n(f?.lost)} corrupt=${n(f?.corrupt)} stale_left=${n(f?.staleLeft)} ` +
    // Issue 7's fields first, in its order; the later issues' after them.
    `pointer_wrong=${n(f?.pointerWrong)} max_resume_s=${f?.maxResumeS === null || !f ? "-1" : f.maxResumeS.toFixed(1)} ` +
    `triggers=${n(f?.triggers)} kills=${n(f?.kills)} pauses=${n(f?.pauses)} stuck_running=${n(f?.stuckRunning)} escaped=${n(f?.escaped)} ` +
    `reissued=${n(f?.reissued)} rolled_back=${n(f?.rolledBack)} republished=${n(f?.republished)} dropped=${n(f?.dropped)} miscounted=${n(f?.miscounted)} ` +
    `hashed_triggers=${n(f?.hashedTriggers)} early_begins=${n(f?.earlyBegins)} reads_cut=${n(f?.readsCut)} ` +
    `unrecorded_publishes=${n(f?.unrecordedPublishes)} refused_records=${n(f?.refusedRecords)} left_behind=${n(f?.leftBehind)} hung_stops=${n(f?.hungStops)}`
  );
}

/**
 * PIDs of every step process: those the journals name (their `start` lines), and any process
 * running this soak's own step script (its path is unique to this soak's temp dir), which
 * catches a step that has not written its first line yet.
 */
function stepPids(dirs: SoakDirs): number[] {
  const pids = new Set<number>();
  for (const file of fs.readdirSync(dirs.journal)) {
    for (const line of fs.readFileSync(path.join(dirs.journal, file), "utf8").split("\n")) {
      const fields = line.split(" ");
      if (fields[1] === "start") pids.add(Number(fields[3]));
    }
  }
  for (const entry of fs.readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (fs.readFileSync(`/proc/${entry}/cmdline`, "utf8").split("\0").includes(dirs.stepScript))
        pids.add(Number(entry));
    } catch {
      // exited meanwhile
    }
  }
  return [...pids];
}

/** Live processes carrying this soak's key prefix and a run id in their environment: steps and what they started. */
function soakProcessPids(prefix: string): number[] {
  const pids: number[] = [];
  for (const entry of fs.readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const environ = `\0${fs.readFileSync(`/proc/${entry}/environ`, "utf8")}`;
      if (
        environ.includes(`\0CLAIMWATCH_KEY_PREFIX=${prefix}\0`) &&
        environ.includes("\0CLAIMWATCH_RUN_ID=") &&
        isAlive(Number(entry))
      )
        pids.push(Number(entry));
    } catch {
      // exited meanwhile
    }
  }
  return pids;
}

/** SIGKILLs step processes still running, after checking by /proc that the PID is our step. */
function killStepProcesses(dirs: SoakDirs, events: EventLog): void {
  for (const pid of soakProcessPids(soak.prefix)) {
    try {
      process.kill(pid, "SIGKILL");
      events.record("orphan-kill", { pid });
    } catch {
      // exited meanwhile
    }
  }
  for (const pid of stepPids(dirs)) {
    if (!isAlive(pid)) continue;
    let cmdline: string;
    try {
      cmdline = fs.readFileSync(`/proc/${pid}/cmdline`, "utf8");
    } catch {
      continue;
    }
    if (!cmdline.includes(dirs.stepScript)) continue; // the PID was reused by something else
    try {
      process.kill(pid, "SIGKILL");
      events.record("orphan-kill", { pid });
    } catch {
      // exited meanwhile
    }
  }
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return !fs.readFileSync(`/proc/${pid}/stat`, "utf8").includes(") Z ");
  } catch {
    return false;
  }
}

let figures: Figures | null = null;
let exitCode = 2;
try {
  figures = await main();
  const bad =
    figures.overlaps +
    figures.lost +
    figures.corrupt +
    figures.staleLeft +
    figures.pointerWrong +
    figures.stuckRunning +
    figures.unrecordedPublishes +
    figures.miscounted +
    figures.escaped +
    figures.reissued +
    figures.rolledBack +
    figures.republished +
    figures.dropped +
    figures.leftBehind +
    figures.hungStops;
  // Hashed triggers whose jobs never took the early-begin path: the soak did not test it.
  const unexercised = figures.hashedTriggers > 0 && figures.earlyBegins === 0;
  if (unexercised) say("soak: no attempt began its record before its version was read: that path went untested");
  exitCode = bad === 0 && !unexercised ? 0 : 1;
} catch (error) {
  say(`soak: failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
}
const left = await cleanUp();
unmountOutputs(exitCode !== 0 || args.keep || left.length > 0);
const events = readEvents(path.join(soak.dirs.root, "events.jsonl"));
say(
  `processes left running: ${left.length ? left.join(", ") : "none"}; events ${events.length}; run time ${elapsed()}` +
    (exitCode !== 0 || args.keep ? `; kept ${soak.dirs.root}` : ""),
);
if (left.length && exitCode === 0) exitCode = 2;
if (exitCode === 0 && !args.keep) fs.rmSync(soak.dirs.root, { recursive: true, force: true });
say(resultLine(figures));
process.exit(exitCode);
