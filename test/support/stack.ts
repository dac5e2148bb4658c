/**
 * A rebuild test bed: a real Redis, a definitions file in a temp dir, real worker processes
 * (`worker/index.ts`) that tests kill, pause and stop by PID, and helpers to read what the
 * workers recorded.
 */
import { spawn, type ChildProcess } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { after } from "node:test";
import { Queue } from "bullmq";
import type { Redis } from "ioredis";
import { stringify } from "yaml";
import { deriveClaimsRedisUrl } from "../../lib/config";
import { createRedis, closeRedis } from "../../lib/redis/client";
import { redisKeys, type RedisKeys } from "../../lib/redis/keys";
import { loadDefinitions, type Definitions } from "../../lib/rebuilds/definitions";
import { queuePrefix, REBUILD_QUEUE } from "../../lib/rebuilds/queue";
import { triggerRebuild, type TriggerRequest } from "../../lib/rebuilds/trigger";
import type { RebuildDeps } from "../../lib/rebuilds/run-rebuild";
import { readRun } from "../../lib/runs/records";
import type { RunRecord } from "../../lib/runs/types";
import { startTestRedis, uniquePrefix, type TestRedis } from "./redis";
import { freePort } from "../../lib/redis/embedded";
import { entryArguments } from "../../lib/launcher/bundle.mjs";
import { newWorkerIdentity } from "../../lib/workers/heartbeat";
import { descendantPids, waitForLine, waitUntilGone } from "./processes";

export interface TestWorker {
  child: ChildProcess;
  pid: number;
  output(): string;
  waitFor(pattern: RegExp, timeoutMs?: number): Promise<string>;
  /** Sends `signal` and waits for the exit code. */
  stop(signal?: NodeJS.Signals): Promise<number | null>;
}

export interface TestBed {
  redis: TestRedis;
  dir: string;
  configFile: string;
  keys: RedisKeys;
  main: Redis;
  claims: Redis;
  queue: Queue;
  definitions: Definitions;
  env: NodeJS.ProcessEnv;
  /** Starts a worker and waits for its line `until` (default: `ready:`). */
  startWorker(extraEnv?: Record<string, string>, options?: { until?: RegExp }): Promise<TestWorker>;
  trigger(name: string, request?: TriggerRequest): Promise<string>;
  waitForRun(predicate: (run: RunRecord) => boolean, timeoutMs?: number, label?: string): Promise<RunRecord>;
  runsOfJob(jobId: string): Promise<RunRecord[]>;
  allRuns(): Promise<RunRecord[]>;
  close(): Promise<void>;
}

const workers = new Set<TestWorker>();
after(async () => {
  for (const worker of workers) if (worker.child.exitCode === null) worker.child.kill("SIGKILL");
});

export interface TestBedOptions {
  /** A server started by the test (e.g. the primary of a Sentinel group) instead of a fresh one. */
  redis?: TestRedis;
  /**
   * The URL the bed's clients and its workers use (REDIS_URL; CLAIMS_REDIS_URL is DB 1 of it),
   * in any form claimwatch accepts (ACL user, TLS, Sentinel). Default: the server's plain URL.
   */
  url?: string;
}

export async function createTestBed(
  rebuilds: Record<string, unknown>,
  extra: Record<string, unknown> = {},
  options: TestBedOptions = {},
): Promise<TestBed> {
  const redis = options.redis ?? (await startTestRedis());
  const url = options.url ?? redis.url;
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "claimwatch-bed-"));
  const configFile = path.join(dir, "claimwatch.yaml");
  fs.writeFileSync(configFile, stringify({ rebuilds, ...extra }));
  const loaded = loadDefinitions(configFile);
  if (!loaded.ok) throw loaded.error;
  const prefix = uniquePrefix("bed");
  const keys = redisKeys(prefix);
  const main = createRedis(url, "worker", "test-main");
  const claims = createRedis(deriveClaimsRedisUrl(url, undefined), "worker", "test-claims");
  const queue = new Queue(REBUILD_QUEUE, { connection: main, prefix: queuePrefix(keys) });
  queue.on("error", () => {}); // without a listener BullMQ prints every reconnect failure
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    REDIS_URL: url,
    CLAIMWATCH_CONFIG: configFile,
    CLAIMWATCH_DATA_DIR: path.join(dir, ".data"),
    CLAIMWATCH_KEY_PREFIX: prefix,
  };
  delete env.CLAIMS_REDIS_URL;

  const bed: TestBed = {
    redis,
    dir,
    configFile,
    keys,
    main,
    claims,
    queue,
    definitions: loaded.definitions,
    env,
    async startWorker(extraEnv: Record<string, string> = {}, { until = /ready: / } = {}) {
      // As `npm start` runs it: its bundle (lib/launcher/bundle.mjs), built by the first start.
      const child = spawn(process.execPath, await entryArguments("worker/index.ts"), {
        env: { ...env, ...extraEnv },
        stdio: ["ignore", "pipe", "pipe"],
      });
      let output = "";
      child.stdout!.on("data", (chunk: Buffer) => (output += chunk.toString()));
      child.stderr!.on("data", (chunk: Buffer) => (output += chunk.toString()));
      const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
      const worker: TestWorker = {
        child,
        pid: child.pid!,
        output: () => output,
        waitFor: (pattern, timeoutMs = 30_000) =>
          pattern.test(output) ? Promise.resolve(output) : waitForLine(child, pattern, timeoutMs),
        async stop(signal = "SIGTERM") {
          if (child.exitCode === null && child.signalCode === null) {
            child.kill("SIGCONT");
            child.kill(signal);
          }
          return exited;
        },
      };
      workers.add(worker);
      await worker.waitFor(until, 30_000);
      return worker;
    },
    async trigger(name, request = {}) {
      const result = await triggerRebuild(queue, main, keys, loaded.definitions, name, request);
      if (result.status !== "queued" && result.status !== "deduplicated") throw new Error(JSON.stringify(result));
      return result.jobId;
    },
    async waitForRun(predicate, timeoutMs = 30_000, label = "a matching run") {
      const deadline = Date.now() + timeoutMs;
      while (Date.now() < deadline) {
        const match = (await bed.allRuns()).find(predicate);
        if (match) return match;
        await new Promise((r) => setTimeout(r, 100));
      }
      throw new Error(`no ${label} within ${timeoutMs} ms; runs: ${JSON.stringify(await bed.allRuns(), null, 1)}`);
    },
    async runsOfJob(jobId) {
      return (await bed.allRuns()).filter((run) => run.jobId === jobId).sort((a, b) => a.attempt - b.attempt);
    },
    async allRuns() {
      const ids = await main.zrange(keys.runIndex(), "0", "-1");
      const runs = await Promise.all(ids.map((id) => readRun(main, keys, id)));
      return runs.filter((run): run is RunRecord => run !== null);
    },
    async close() {
      for (const worker of workers) await worker.stop("SIGKILL");
      await queue.close();
      await closeRedis(main);
      await closeRedis(claims);
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
  return bed;
}

/** A `run` step that takes `seconds`, then writes a file unique to its run (distinct build hashes). */
/** What `runRebuild` needs to run attempts in this process against the bed (a worker identity of its own). */
export function rebuildDepsOf(bed: TestBed): RebuildDeps {
  return {
    main: bed.main,
    claims: bed.claims,
    keys: bed.keys,
    definitions: bed.definitions,
    worker: newWorkerIdentity("test"),
  };
}

/** A rebuild scheduled every 2 s (BullMQ accepts a seconds field), with a step that does nothing. */
export function tickingEvery2s() {
  return {
    output: "out/ticking",
    schedule: { cron: "*/2 * * * * *", tz: "UTC" },
    claim: { ttl: "4s", refreshEvery: "1s" },
    timeLimit: "1m",
    idempotency: { ttl: "1s" },
    steps: [{ name: "noop", run: ["true"] }],
  };
}

export function slowStep(seconds: number, name = "work") {
  return {
    name,
    run: ["sh", "-c", `sleep ${seconds}; echo "$CLAIMWATCH_RUN_ID" > "$CLAIMWATCH_WORK/run.txt"; echo done`],
    killGrace: "1s",
  };
}

export interface TestWebServer {
  url: string;
  /** Everything the launcher and its next-server printed so far. */
  output(): string;
  /** SIGTERM, then waits until the launcher and its next-server are gone. */
  stop(): Promise<void>;
  /** SIGKILL to the launcher and every process under it at once (a crash), then waits until they are gone. */
  kill(): Promise<void>;
}

/** `npm run web` against the bed's Redis and definitions, on a free port (needs a build). */
export async function startWebServer(bed: TestBed, env: Record<string, string> = {}): Promise<TestWebServer> {
  const port = await freePort();
  const web = spawn(process.execPath, ["--import", "tsx", "scripts/web.ts"], {
    env: { ...bed.env, PORT: String(port), ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let output = "";
  web.stdout!.on("data", (chunk: Buffer) => (output += chunk.toString()));
  web.stderr!.on("data", (chunk: Buffer) => (output += chunk.toString()));
  await waitForLine(web, /dashboard at/, 90_000);
  return {
    url: `http://127.0.0.1:${port}`,
    output: () => output,
    async stop() {
      const children = descendantPids(web.pid!);
      web.kill("SIGTERM");
      await waitUntilGone([web.pid!, ...children], 15_000);
    },
    async kill() {
      const all = [web.pid!, ...descendantPids(web.pid!)];
      for (const pid of all) {
        try {
          process.kill(pid, "SIGKILL");
        } catch {
          // already gone
        }
      }
      await waitUntilGone(all, 15_000);
    },
  };
}
