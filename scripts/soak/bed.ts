/**
 * The soak's test bed: one redis-server (AOF, fixed port and data dir so it can be restarted
 * with its data), a definitions file in a temp dir, real worker processes (`worker/index.ts`)
 * and an append-only event log of everything the soak did to them. Every process it starts is
 * tracked by PID and stopped by PID in `close()`; nothing is matched by name.
 */
import crypto from "node:crypto";
import { spawn, type ChildProcess } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { stringify } from "yaml";
import { startRedisServer, type RedisServerHandle } from "../../lib/redis/embedded";
import { skewedClockEnv } from "../faults/clock";
import { adminClient, askPrimaryPort, pollUntil, startSentinelGroup, untilInSync } from "../faults/sentinel";
import { STEP_SCRIPT } from "./step-script";
import { entryArguments } from "../../lib/launcher/bundle.mjs";

export const REPO_ROOT = fileURLToPath(new URL("../..", import.meta.url));

/** Claim timing of every soak rebuild: short, so pauses and kills outlive claims. */
export const CLAIM_TTL_MS = 2_500;
export const CLAIM_REFRESH_MS = 1_000;
/** How long a step may take to stop after claimwatch aborts it (its SIGTERM → SIGKILL grace). */
export const KILL_GRACE_MS = 1_000;

export interface SoakRebuild {
  name: string;
  tenants?: string[];
  /** chatty: a log line per chunk; quiet: output only at the end (step-script.ts). */
  mode: "chatty" | "quiet";
  chunkMs: number;
  minParts: number;
  spanParts: number;
  /**
   * Triggered without a version: each job reads its version from an input file the trigger
   * stream rewrites (`versionInputOf`), and the worker records the run as running before the read
   * ends (the soak's workers run with CLAIMWATCH_INPUTS_VISIBLE_AFTER_MS=0), then adds the version.
   */
  hashedInputs?: boolean;
}

/**
 * Three rebuilds, one with tenants. Runs take about 0.4–4 s, so many outlive the 2.5 s claim TTL
 * (a pause or kill mid-run then matters) while the soak still completes dozens per minute.
 */
export const SOAK_REBUILDS: SoakRebuild[] = [
  { name: "tiles", mode: "chatty", chunkMs: 120, minParts: 6, spanParts: 8 },
  { name: "archive", mode: "quiet", chunkMs: 200, minParts: 8, spanParts: 8, hashedInputs: true },
  { name: "incidents", tenants: ["acme", "globex"], mode: "quiet", chunkMs: 150, minParts: 5, spanParts: 9 },
];

/** The rebuilds triggered without a version (`hashedInputs`). */
export const HASHED_REBUILDS: ReadonlySet<string> = new Set(
  SOAK_REBUILDS.filter((r) => r.hashedInputs).map((r) => r.name),
);

export interface SoakClaimRef {
  rebuild: string;
  /** undefined: the rebuild has no tenants. */
  tenant: string | undefined;
}

export function claimRefs(): SoakClaimRef[] {
  return SOAK_REBUILDS.flatMap((r) => (r.tenants ?? [undefined]).map((tenant) => ({ rebuild: r.name, tenant })));
}

/** The input a hashed rebuild's version is read from: `v0001`, `v0002`, … as the trigger stream writes them. */
export function versionInputOf(root: string, rebuild: string): string {
  return path.join(root, "inputs", `${rebuild}.version`);
}

/**
 * A second, unchanging input of each hashed rebuild: random bytes, so every read of its inputs
 * takes long enough (a few hundred ms on a loaded 2-core machine) for the soak's kills, pauses
 * and Redis crashes to land between the record's begin and its version, not only around them.
 */
export const BULK_INPUT_MIB = 48;

function bulkInputOf(root: string, rebuild: string): string {
  return path.join(root, "inputs", `${rebuild}.bulk`);
}

/** Every input of a hashed rebuild, in the order its definition names them. */
export function hashedInputPaths(root: string, rebuild: string): string[] {
  return [versionInputOf(root, rebuild), bulkInputOf(root, rebuild)];
}

/** The version the soak writes first into every hashed rebuild's input (before any trigger). */
export const FIRST_INPUT_VERSION = "v0000";

export function claimLabel(ref: { rebuild: string; tenant: string | undefined | null }): string {
  return ref.tenant ? `${ref.rebuild}/${ref.tenant}` : ref.rebuild;
}

export interface SoakDirs {
  root: string;
  journal: string;
  logs: string;
  redis: string;
  outputs: string;
  config: string;
  stepScript: string;
}

/** Builds kept per output besides `current` and the published one (`retention.builds`). */
export function prepareDirs(root: string, options: { retentionBuilds?: number; inputFaults?: number } = {}): SoakDirs {
  const dirs: SoakDirs = {
    root,
    journal: path.join(root, "journal"),
    logs: path.join(root, "logs"),
    redis: path.join(root, "redis"),
    outputs: path.join(root, "out"),
    config: path.join(root, "claimwatch.yaml"),
    stepScript: path.join(root, "step.mjs"),
  };
  for (const dir of [dirs.journal, dirs.logs, dirs.redis, dirs.outputs]) fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(dirs.stepScript, STEP_SCRIPT);
  // With `inputFaults` each rebuild's step reads one input file first, and fails that read (EIO,
  // exit 75, declared transient) with that probability (--input-faults).
  const inputOf = (name: string) => path.join(root, "inputs", `${name}.txt`);
  const inputFaults = options.inputFaults ?? 0;
  if (inputFaults > 0) {
    fs.mkdirSync(path.join(root, "inputs"), { recursive: true });
    for (const r of SOAK_REBUILDS) fs.writeFileSync(inputOf(r.name), `input of ${r.name}\n`);
  }
  for (const r of SOAK_REBUILDS.filter((r) => r.hashedInputs)) {
    fs.mkdirSync(path.dirname(versionInputOf(root, r.name)), { recursive: true });
    fs.writeFileSync(versionInputOf(root, r.name), `${FIRST_INPUT_VERSION}\n`);
    const bulk = fs.openSync(bulkInputOf(root, r.name), "w");
    for (let i = 0; i < BULK_INPUT_MIB; i++) fs.writeSync(bulk, crypto.randomBytes(1024 * 1024));
    fs.closeSync(bulk);
  }
  const rebuilds = Object.fromEntries(
    SOAK_REBUILDS.map((r) => [
      r.name,
      {
        output: `out/${r.name}`,
        ...(r.hashedInputs ? { inputs: hashedInputPaths(root, r.name) } : {}),
        ...(r.tenants ? { tenants: r.tenants } : {}),
        claim: { ttl: `${CLAIM_TTL_MS}ms`, refreshEvery: `${CLAIM_REFRESH_MS}ms` },
        timeLimit: "1m",
        retries: { attempts: 6, backoff: "300ms", maxBackoff: "2s" },
        idempotency: { ttl: "1h" },
        steps: [
          {
            name: "write",
            run: [
              process.execPath,
              dirs.stepScript,
              dirs.journal,
              r.mode,
              String(r.chunkMs),
              String(r.minParts),
              String(r.spanParts),
              ...(inputFaults > 0 ? [inputOf(r.name), String(inputFaults)] : []),
            ],
            // The journal is the checker's instrument: its times come from the real clock, also
            // under a worker whose clock is skewed (the step would inherit its libfaketime).
            env: { LD_PRELOAD: "", FAKETIME: "" },
            killGrace: `${KILL_GRACE_MS}ms`,
            // 75: an input read refused (--input-faults) or a write refused by a full disk (disk-full).
            transientExitCodes: [75],
          },
        ],
      },
    ]),
  );
  // By default every build is kept (the checker re-hashes each one on disk); with a small
  // `retentionBuilds` workers prune old builds while runs reproduce their hashes (issue 14).
  const retention = {
    runs: 100_000,
    completedJobs: 100_000,
    failedJobs: 100_000,
    builds: options.retentionBuilds ?? 100_000,
  };
  fs.writeFileSync(dirs.config, stringify({ rebuilds, retention }));
  return dirs;
}

// --- event log ---------------------------------------------------------------------------

export interface SoakEvent {
  t: number;
  kind: string;
  [field: string]: unknown;
}

/** What the soak did, when: JSON lines in `<root>/events.jsonl` (the checker's timeline). */
export class EventLog {
  readonly events: SoakEvent[] = [];
  constructor(private readonly file: string) {}

  record(kind: string, fields: Record<string, unknown> = {}): SoakEvent {
    // `kind` last: a field of that name must not turn the event into another kind.
    const event: SoakEvent = { t: Date.now(), ...fields, kind };
    this.events.push(event);
    fs.appendFileSync(this.file, JSON.stringify(event) + "\n");
    return event;
  }
}

// --- Redis -------------------------------------------------------------------------------

/** A Redis the soak started and its chaos restarts: one server, or a Sentinel group. */
export interface SoakRedisServer {
  /** What clients dial (DB 0). */
  readonly url: string;
  /** Which Redis this is in the event log ("main", or "claims" when the claims Redis is separate). */
  readonly role: "main" | "claims";
  /** Every process of it running now (servers and sentinels), by PID. */
  pids(): number[];
  /** A restart (`crash`: SIGKILL) of one server; for a Sentinel group, a failover (`SoakSentinelRedis`). */
  restart(downMs: number, events: EventLog, options?: { crash?: boolean }): Promise<void>;
  stop(): Promise<void>;
}

/** SIGKILL a redis-server the soak started (a crash: no AOF fsync) and wait until it has exited. */
async function killAndWait(server: RedisServerHandle): Promise<void> {
  const exited = new Promise<void>((resolve) =>
    server.child.exitCode !== null || server.child.signalCode !== null
      ? resolve()
      : server.child.once("exit", () => resolve()),
  );
  process.kill(server.pid, "SIGKILL");
  await exited;
}

/** One redis-server that can be restarted on the same port with the same data (AOF). */
export class SoakRedis implements SoakRedisServer {
  private constructor(
    private handle: RedisServerHandle | null,
    readonly port: number,
    private readonly dir: string,
    /** Server options beyond the defaults (e.g. RDB-only persistence), kept across restarts. */
    private readonly extraArgs: string[],
    /** Which Redis this is in the event log ("main", or "claims" when the claims Redis is separate). */
    readonly role: "main" | "claims",
  ) {}

  static async start(dir: string, role: "main" | "claims" = "main", extraArgs: string[] = []): Promise<SoakRedis> {
    const handle = await startRedisServer({ dir, dieWithParent: true, extraArgs });
    return new SoakRedis(handle, handle.port, dir, extraArgs, role);
  }

  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }

  get pid(): number | null {
    return this.handle?.pid ?? null;
  }

  pids(): number[] {
    return this.handle ? [this.handle.pid] : [];
  }

  /**
   * SIGTERM (Redis fsyncs its AOF and exits) or, with `crash`, SIGKILL (AOF everysec: the last
   * second of writes may be lost), wait `downMs`, start again on the same port and data.
   */
  async restart(downMs: number, events: EventLog, options: { crash?: boolean } = {}): Promise<void> {
    const old = this.handle;
    events.record(options.crash ? "redis-crash" : "redis-stop", { pid: old?.pid ?? null, role: this.role });
    this.handle = null;
    if (options.crash && old) await killAndWait(old);
    await old?.stop(10_000);
    events.record("redis-down", { pid: old?.pid ?? null, role: this.role });
    await sleep(downMs);
    // The port was ours a moment ago; another process could take it meanwhile: retry briefly.
    const deadline = Date.now() + 10_000;
    for (;;) {
      try {
        this.handle = await startRedisServer({
          dir: this.dir,
          port: this.port,
          dieWithParent: true,
          extraArgs: this.extraArgs,
        });
        break;
      } catch (error) {
        if (Date.now() > deadline) throw error;
        await sleep(250);
      }
    }
    events.record("redis-up", { pid: this.handle.pid, role: this.role });
  }

  /**
   * SIGSTOP the server for `ms`, then SIGCONT: a hung host. Connections stay open and take
   * commands; nothing is answered until the thaw (unlike a restart, where connections drop).
   */
  async freeze(ms: number, events: EventLog): Promise<void> {
    const handle = this.handle;
    if (!handle) return;
    process.kill(handle.pid, "SIGSTOP");
    events.record("redis-freeze", { pid: handle.pid, ms: Math.round(ms), role: this.role });
    try {
      await sleep(ms);
    } finally {
      process.kill(handle.pid, "SIGCONT");
      events.record("redis-thaw", { pid: handle.pid, role: this.role });
    }
  }

  async stop(): Promise<void> {
    const handle = this.handle;
    this.handle = null;
    await handle?.stop(5_000);
  }
}

/**
 * The data servers' settings beyond the embedded defaults: a primary refuses writes unless both
 * replicas acknowledged the stream within 2 s (NOREPLICAS), so a primary the sentinels have
 * replaced — still reachable, not yet demoted — takes no writes that its demotion would throw
 * away; with 1, a forced failover lost a run record in every run tried (RELIABILITY.md, "Sentinel").
 */
export const SENTINEL_DATA_ARGS = ["--min-replicas-to-write", "2", "--min-replicas-max-lag", "2"];

/**
 * The main Redis as a Sentinel group (`--redis sentinel`): a primary, two asynchronous replicas
 * (`SENTINEL_DATA_ARGS`: writes stop while either is missing) and three sentinels, each on a fixed port and data dir (AOF) so a killed server comes back with its
 * data. Clients dial the group (`redis+sentinel://…/soak`) and follow the primary. Its `restart`
 * is a failover: writes the replica had not received yet are lost, as asynchronous replication
 * loses them.
 */
export class SoakSentinelRedis implements SoakRedisServer {
  /** Its replicas: a trigger counts once all have it (CLAIMWATCH_TRIGGER_REPLICAS). */
  static readonly REPLICAS = 2;
  readonly role = "main" as const;

  private constructor(
    /** The data servers by port (a killed one is null until it is back). */
    private readonly nodes: Map<number, { handle: RedisServerHandle | null; dir: string }>,
    private readonly sentinels: RedisServerHandle[],
    private readonly name: string,
    readonly url: string,
  ) {}

  static async start(dir: string, events: EventLog): Promise<SoakSentinelRedis> {
    const dirs = new Map<RedisServerHandle, string>();
    const started = new Map<string, number>();
    const group = await startSentinelGroup(
      async (extraArgs, { sentinelConfig, role }) => {
        // One data dir per server: two AOF servers in one dir would mix their files.
        started.set(role, (started.get(role) ?? 0) + 1);
        const serverDir = `${dir}-${role}${started.get(role)}`;
        const handle = await startRedisServer({
          dir: serverDir,
          dieWithParent: true,
          extraArgs,
          ...(sentinelConfig ? { sentinelConfig } : {}),
        });
        dirs.set(handle, serverDir);
        events.record("redis-up", { pid: handle.pid, port: handle.port, first: true, role: "main", node: role });
        return handle;
      },
      // A primary silent for 1 s is down; a failover gets 5 s before another is tried.
      {
        name: "soak",
        downAfterMs: 1_000,
        failoverTimeoutMs: 5_000,
        dataArgs: SENTINEL_DATA_ARGS,
        replicas: SoakSentinelRedis.REPLICAS,
      },
    );
    const nodes = new Map(
      [group.primary, ...group.replicas].map((handle) => [handle.port, { handle, dir: dirs.get(handle)! }] as const),
    );
    return new SoakSentinelRedis(nodes, group.sentinels, group.name, group.url);
  }

  pids(): number[] {
    return [...[...this.nodes.values()].map((node) => node.handle), ...this.sentinels].flatMap((handle) =>
      handle ? [handle.pid] : [],
    );
  }

  /** The port the sentinels name as the primary now. */
  primaryPort(): Promise<number | null> {
    return askPrimaryPort(this.name, this.sentinels);
  }

  /**
   * A failover. With `crash`: the primary is SIGKILLed, the sentinels promote the replica once it
   * has been silent past down-after-milliseconds, and the killed server comes back (after
   * `downMs` at least) on its port and data as a replica of the new primary. Without: `SENTINEL
   * FAILOVER`, the primary demoted while it runs (its clients see READONLY, or their connection
   * closed, and re-ask the sentinels). Events: `redis-crash` (crash only), `redis-failover` once
   * the sentinels name the new primary, `redis-up` when the killed server is back.
   */
  async restart(downMs: number, events: EventLog, options: { crash?: boolean } = {}): Promise<void> {
    const kind = options.crash ? "redis-crash" : "redis";
    const from = await this.primaryPort();
    const node = from === null ? undefined : this.nodes.get(from);
    const replicas = [...this.nodes.entries()].filter(([port]) => port !== from).map(([, replica]) => replica.handle);
    if (from === null || !node?.handle || replicas.some((replica) => !replica)) {
      events.record("chaos-skip", { action: kind, why: "no primary and replicas to fail over" });
      return;
    }
    // A replica still syncing after the last failover cannot be promoted: wait for them, as an
    // operator would (a primary lost before that is an outage, not a failover).
    try {
      for (const replica of replicas) await untilInSync(replica!, 30_000);
    } catch (error) {
      events.record("chaos-skip", { action: kind, why: String(error) });
      return;
    }
    const started = Date.now();
    if (options.crash) {
      const old = node.handle;
      node.handle = null;
      events.record("redis-crash", { pid: old.pid, port: from, role: this.role, failover: true });
      await killAndWait(old);
      await old.stop(1_000);
      events.record("redis-down", { pid: old.pid, port: from, role: this.role });
    } else {
      events.record("redis-failover-asked", { from });
    }
    let to: number | null = null;
    try {
      if (!options.crash) {
        const sentinel = adminClient(this.sentinels[0]!);
        try {
          await sentinel.call("SENTINEL", "FAILOVER", this.name);
        } finally {
          sentinel.disconnect();
        }
      }
      to = await pollUntil("the sentinels name a new primary", 30_000, async () => {
        const port = await this.primaryPort();
        return port !== null && port !== from ? port : null;
      });
      events.record("redis-failover", { from, to, crash: options.crash === true, ms: Date.now() - started });
    } catch (error) {
      events.record("chaos-error", { action: kind, error: String(error) });
    }
    if (!options.crash) return;
    await sleep(Math.max(0, started + downMs - Date.now()));
    // Back as the new primary's replica from its first moment: never a second primary. (With no
    // failover, back as the primary it was.)
    const deadline = Date.now() + 10_000;
    for (;;) {
      try {
        node.handle = await startRedisServer({
          dir: node.dir,
          port: from,
          dieWithParent: true,
          extraArgs: [...SENTINEL_DATA_ARGS, ...(to === null ? [] : ["--replicaof", "127.0.0.1", String(to)])],
        });
        break;
      } catch (error) {
        if (Date.now() > deadline) throw error;
        await sleep(250);
      }
    }
    events.record("redis-up", { pid: node.handle.pid, port: from, role: this.role, replicaOf: to });
  }

  async stop(): Promise<void> {
    const handles = [...this.sentinels, ...[...this.nodes.values()].map((node) => node.handle)];
    for (const node of this.nodes.values()) node.handle = null;
    await Promise.all(handles.map((handle) => handle?.stop(5_000)));
  }
}

// --- workers -----------------------------------------------------------------------------

export interface SoakWorker {
  pid: number;
  /** claimwatch's worker id (from its "ready" line). */
  id: string | null;
  child: ChildProcess;
  startedAt: number;
  readyAt: number | null;
  /** SIGSTOPped right now. */
  paused: boolean;
  /** Being killed, stopped or deployed: not a chaos target any more. */
  leaving: boolean;
  exitedAt: number | null;
  exited: Promise<void>;
}

export class WorkerPool {
  readonly all: SoakWorker[] = [];

  constructor(
    private readonly env: NodeJS.ProcessEnv,
    private readonly logDir: string,
    private readonly events: EventLog,
    /**
     * Wall-clock offsets (libfaketime, e.g. "-20s"; "0": the real clock) given to the workers in
     * turn as they start: hosts whose clocks disagree. Monotonic clocks stay real.
     */
    private readonly clockSkews: string[] = ["0"],
    /**
     * How long a stop may take before its SIGKILL: what `npm start` gives a worker (its jobs'
     * wait + STOP_AFTER_JOBS_MS). A stop that needs longer is a `worker-stop-timeout` (hung_stops).
     */
    readonly stopGraceMs = 20_000,
  ) {}

  /** Workers that are up and not leaving (paused ones included). */
  live(): SoakWorker[] {
    return this.all.filter((w) => w.exitedAt === null && !w.leaving);
  }

  byId(id: string | null | undefined): SoakWorker | undefined {
    return id ? this.all.find((w) => w.id === id) : undefined;
  }

  /** Spawns a worker; resolves when it printed "ready" (or rejects after `timeoutMs`). */
  async start(timeoutMs = 40_000): Promise<SoakWorker> {
    const skew = this.clockSkews[this.all.length % this.clockSkews.length] ?? "0";
    // As `npm start` runs it: its bundle (lib/launcher/bundle.mjs).
    const child = spawn(process.execPath, await entryArguments("worker/index.ts"), {
      cwd: REPO_ROOT,
      env: skew === "0" ? this.env : { ...this.env, ...skewedClockEnv(skew) },
      stdio: ["ignore", "pipe", "pipe"],
    });
    const pid = child.pid;
    if (pid === undefined) throw new Error("could not spawn a worker");
    const log = fs.createWriteStream(path.join(this.logDir, `worker-${pid}.log`));
    let exitedResolve!: () => void;
    const worker: SoakWorker = {
      pid,
      id: null,
      child,
      startedAt: Date.now(),
      readyAt: null,
      paused: false,
      leaving: false,
      exitedAt: null,
      exited: new Promise<void>((resolve) => (exitedResolve = resolve)),
    };
    this.all.push(worker);
    this.events.record("worker-start", { pid, clockSkew: skew });
    let pending = "";
    let readyResolve: (() => void) | null = null;
    const onData = (chunk: Buffer) => {
      log.write(chunk);
      if (worker.readyAt !== null) return;
      pending += chunk.toString();
      const match = /\[worker ([^\]]+)\] ready: /.exec(pending);
      if (match) {
        worker.id = match[1]!;
        worker.readyAt = Date.now();
        pending = "";
        this.events.record("worker-ready", { pid, workerId: worker.id });
        readyResolve?.();
      }
    };
    child.stdout!.on("data", onData);
    child.stderr!.on("data", onData);
    child.once("exit", (code, signal) => {
      worker.exitedAt = Date.now();
      this.events.record("worker-exit", { pid, workerId: worker.id, code, signal });
      log.end();
      exitedResolve();
    });
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`worker ${pid} not ready within ${timeoutMs} ms`)), timeoutMs);
      readyResolve = () => {
        clearTimeout(timer);
        resolve();
      };
      void worker.exited.then(() => {
        clearTimeout(timer);
        if (worker.readyAt === null) reject(new Error(`worker ${pid} exited before it was ready`));
      });
    });
    return worker;
  }

  signal(worker: SoakWorker, signal: NodeJS.Signals): boolean {
    if (worker.exitedAt !== null) return false;
    try {
      process.kill(worker.pid, signal);
      return true;
    } catch {
      return false;
    }
  }

  /** SIGCONT + SIGTERM, SIGKILL after `graceMs`; resolves when it exited. */
  async stop(worker: SoakWorker, graceMs = this.stopGraceMs): Promise<void> {
    worker.leaving = true;
    if (worker.exitedAt !== null) return;
    this.signal(worker, "SIGCONT");
    worker.paused = false;
    this.signal(worker, "SIGTERM");
    const timer = setTimeout(() => {
      this.events.record("worker-stop-timeout", { pid: worker.pid, workerId: worker.id });
      this.signal(worker, "SIGKILL");
    }, graceMs);
    await worker.exited;
    clearTimeout(timer);
  }

  /** Last resort: SIGKILL every worker still up, by PID. */
  async killAll(): Promise<void> {
    for (const worker of this.all) {
      if (worker.exitedAt === null) {
        this.signal(worker, "SIGCONT");
        this.signal(worker, "SIGKILL");
      }
    }
    await Promise.race([Promise.all(this.all.map((w) => w.exited)), sleep(5_000)]);
  }
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Rejects after `ms` (the promise itself keeps running: only use it on idempotent reads). */
export { withTimeout } from "../../lib/settled-within";

/** A small seeded PRNG (mulberry32): a soak can be replayed with `--seed`. */
export function seededRandom(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
