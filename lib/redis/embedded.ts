/**
 * A `redis-server` child process that claimwatch starts and stops itself: the embedded Redis of
 * `npm start` and the throw-away servers of the test suite. It only ever stops the PID it spawned.
 */
import { spawn, type ChildProcess } from "node:child_process";
import fs from "node:fs";
import net from "node:net";
import path from "node:path";
import { findProgram, ProgramMissingError, installHint, REDIS_SERVER } from "../system/packages";

export interface RedisServerOptions {
  /** Data directory (AOF and RDB files). Created if missing. */
  dir: string;
  /** Loopback port; a free one is picked when omitted. */
  port?: number;
  /**
   * Without `port`: ports never picked, though free now — the web server's, which `npm start`
   * binds only after Redis is up (the e2e stack's Redis took the port chosen for its web server,
   * which then failed with EADDRINUSE).
   */
  avoidPorts?: readonly number[];
  /**
   * Without `port`: the port to use when it is free (`npm start` asks for its last one, so
   * workers and dashboards started beside it on that machine find it again after a restart).
   */
  preferredPort?: number;
  /** Extra `redis-server` arguments, e.g. `["--maxmemory-policy", "allkeys-lru"]`. */
  extraArgs?: string[];
  /** Binary to run; default: `redis-server` found on PATH. */
  binary?: string;
  /**
   * SIGKILL the server when the process that started it dies, however it dies (a test file
   * killed at its time limit never runs its `after` hooks): `setpriv --pdeathsig KILL`, where
   * util-linux has it. For tests and the soak; `npm start` stops its Redis itself, in order.
   */
  dieWithParent?: boolean;
  /**
   * Run a Redis Sentinel instead of a data server (`redis-server <conf> --sentinel`, which is what
   * Debian's `redis-sentinel` runs): these lines (`sentinel monitor …`) become its config file in
   * `dir`, which Sentinel rewrites as it learns. No persistence or memory options apply. Tests.
   */
  sentinelConfig?: string[];
  /**
   * Called with the server's pid as soon as it is spawned, before it answers (loading a large AOF
   * takes seconds): `npm start` records it then, so a launcher killed meanwhile leaves nothing the
   * next start cannot find.
   */
  onSpawned?: (pid: number) => void;
}

export interface RedisServerHandle {
  readonly pid: number;
  readonly port: number;
  readonly url: string;
  readonly child: ChildProcess;
  /** SIGTERM (Redis writes its AOF and exits), SIGKILL after `graceMs`. Idempotent. */
  stop(graceMs?: number): Promise<void>;
}

/** A TCP port on 127.0.0.1 that was free a moment ago: `wanted` when it is, else any. */
export function freePort(wanted = 0): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.unref();
    server.on("error", (error) => (wanted ? freePort().then(resolve, reject) : reject(error)));
    server.listen(wanted, "127.0.0.1", () => {
      const address = server.address();
      server.close(() => {
        if (address && typeof address === "object") resolve(address.port);
        else reject(new Error("could not read the port of a probe socket"));
      });
    });
  });
}

/**
 * Asks the server on `port` for its `process_id` over a raw socket. Readiness means *our* child
 * answers: a server already on that port (the port raced) must not be mistaken for it.
 */
function servedByPid(port: number, pid: number, timeoutMs: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect({ host: "127.0.0.1", port });
    let received = "";
    const done = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(timeoutMs, () => done(false));
    socket.on("error", () => done(false));
    socket.on("connect", () => socket.write("INFO server\r\n"));
    socket.on("data", (data) => {
      received += data.toString();
      const match = /process_id:(\d+)/.exec(received);
      if (match) done(Number(match[1]) === pid);
      else if (received.startsWith("-")) done(false);
    });
  });
}

/**
 * Starts `redis-server` bound to 127.0.0.1 with the durability settings claims need:
 * AOF (`appendfsync everysec`) and `maxmemory-policy noeviction`. Resolves once it answers PING.
 * The child runs in its own process group, so a Ctrl-C aimed at the launcher does not stop
 * Redis before the processes that write to it have shut down.
 */
export async function startRedisServer(options: RedisServerOptions): Promise<RedisServerHandle> {
  const binary = options.binary ?? findProgram(REDIS_SERVER.binary);
  if (!binary) throw new ProgramMissingError(REDIS_SERVER, installHint(REDIS_SERVER));
  fs.mkdirSync(options.dir, { recursive: true });

  let lastError: Error | undefined;
  for (let attempt = 0; attempt < 5; attempt++) {
    let port = options.port ?? (await freePort(attempt === 0 ? (options.preferredPort ?? 0) : 0));
    for (let again = 0; options.port === undefined && options.avoidPorts?.includes(port) && again < 20; again++)
      port = await freePort();
    try {
      return await spawnAndWait(binary, port, options);
    } catch (error) {
      lastError = error as Error;
      if (options.port !== undefined) break; // a fixed port will not become free by retrying
    }
  }
  throw lastError ?? new Error("redis-server did not start");
}

async function spawnAndWait(binary: string, port: number, options: RedisServerOptions): Promise<RedisServerHandle> {
  const sentinelArgs = () => {
    const conf = path.resolve(options.dir, "sentinel.conf");
    fs.writeFileSync(conf, options.sentinelConfig!.join("\n") + "\n");
    return [
      conf, "--sentinel",
      "--bind", "127.0.0.1",
      "--port", String(port),
      "--dir", path.resolve(options.dir),
      "--daemonize", "no",
      "--logfile", "",
      ...(options.extraArgs ?? []),
    ]; // prettier-ignore
  };
  const args = options.sentinelConfig ? sentinelArgs() : [
    "--bind", "127.0.0.1",
    "--port", String(port),
    "--dir", path.resolve(options.dir),
    "--daemonize", "no",
    "--protected-mode", "yes",
    "--appendonly", "yes",
    "--appendfsync", "everysec",
    "--maxmemory-policy", "noeviction",
    // A run record's longest fields (its packed step list, ~20 bytes a step; build hashes of 64)
    // pass Redis's default limit of 64 bytes: a larger listpack limit keeps such hashes compact
    // (about 40% less memory per record, measured by bench:api when steps were JSON).
    "--hash-max-listpack-value", "256",
    "--logfile", "",
    ...(options.extraArgs ?? []),
  ]; // prettier-ignore
  const setpriv = options.dieWithParent ? findProgram("setpriv") : null;
  // setpriv execs the server: the child's pid is the server's, as `servedByPid` checks.
  const child = setpriv
    ? spawn(setpriv, ["--pdeathsig", "KILL", "--", binary, ...args], {
        stdio: ["ignore", "pipe", "pipe"],
        detached: true,
      })
    : spawn(binary, args, { stdio: ["ignore", "pipe", "pipe"], detached: true });
  if (child.pid !== undefined) options.onSpawned?.(child.pid);
  let output = "";
  const collect = (chunk: Buffer) => {
    output = (output + chunk.toString()).slice(-4_000);
  };
  child.stdout!.on("data", collect);
  child.stderr!.on("data", collect);

  let exited = false;
  const exitPromise = new Promise<void>((resolve) => {
    child.once("exit", () => {
      exited = true;
      resolve();
    });
  });
  const spawnError = new Promise<never>((_, reject) => child.once("error", reject));

  const deadline = Date.now() + 10_000;
  const ready = (async () => {
    while (Date.now() < deadline) {
      if (exited) break;
      if (await servedByPid(port, child.pid!, 500)) return true;
      await new Promise((r) => setTimeout(r, 50));
    }
    return false;
  })();
  const isReady = await Promise.race([ready, spawnError]);
  if (!isReady) {
    if (!exited) child.kill("SIGKILL");
    await exitPromise;
    const lastLine = output.trim().split("\n").pop() ?? "";
    throw new Error(`redis-server on port ${port} did not start: ${lastLine}`);
  }
  // Once running, stop collecting output; Redis logs go nowhere unless it dies early.
  child.stdout!.removeListener("data", collect).resume();
  child.stderr!.removeListener("data", collect).resume();

  let stopping: Promise<void> | undefined;
  return {
    pid: child.pid!,
    port,
    url: `redis://127.0.0.1:${port}`,
    child,
    stop(graceMs = 10_000) {
      stopping ??= (async () => {
        if (exited) return;
        child.kill("SIGCONT"); // a paused server cannot handle SIGTERM
        child.kill("SIGTERM");
        const timer = setTimeout(() => child.kill("SIGKILL"), graceMs);
        await exitPromise;
        clearTimeout(timer);
      })();
      return stopping;
    },
  };
}

/** Where `npm start` records its embedded Redis, so `npm run web`/`worker` on the same machine find it. */
export function embeddedStatePath(dataDir: string): string {
  return path.join(dataDir, "embedded-redis.json");
}

export function writeEmbeddedState(
  dataDir: string,
  server: Pick<RedisServerHandle, "pid" | "url"> & Partial<Pick<RedisServerHandle, "port">>,
): void {
  fs.writeFileSync(embeddedStatePath(dataDir), JSON.stringify({ pid: server.pid, url: server.url }) + "\n");
  if (server.port) fs.writeFileSync(lastPortPath(dataDir), `${server.port}\n`);
}

export function clearEmbeddedState(dataDir: string): void {
  fs.rmSync(embeddedStatePath(dataDir), { force: true });
}

/** Where `npm start` keeps the port its embedded Redis last had (kept across stops). */
function lastPortPath(dataDir: string): string {
  return path.join(dataDir, "embedded-redis.port");
}

/** The port the embedded Redis of `dataDir` last had, if known. */
export function lastEmbeddedPort(dataDir: string): number | undefined {
  try {
    const port = Number(fs.readFileSync(lastPortPath(dataDir), "utf8").trim());
    return Number.isInteger(port) && port > 0 && port < 65536 ? port : undefined;
  } catch {
    return undefined;
  }
}

export type EmbeddedLookup =
  | { found: true; pid: number; url: string; stateFile: string }
  /** Why none was found, in words for an error message (names the file it read). */
  | { found: false; stateFile: string; why: string };

/**
 * Looks for the embedded Redis that a running `npm start` recorded in `dataDir`: found when its
 * process still exists. A process of another user (EPERM: e.g. claimwatch runs as a service user
 * and an operator asks from a shell) counts as running.
 */
export function lookForEmbeddedRedis(dataDir: string): EmbeddedLookup {
  const stateFile = embeddedStatePath(dataDir);
  let state: { pid: number; url: string };
  try {
    state = JSON.parse(fs.readFileSync(stateFile, "utf8")) as { pid: number; url: string };
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    const why =
      code === "ENOENT"
        ? `${stateFile} does not exist${fs.existsSync(dataDir) ? "" : ` (nor does the data dir ${dataDir})`}`
        : `${stateFile} cannot be read (${code ?? (error as Error).message})`;
    return { found: false, stateFile, why };
  }
  if (!Number.isSafeInteger(state?.pid) || typeof state?.url !== "string") {
    return { found: false, stateFile, why: `${stateFile} is not a record of an embedded Redis` };
  }
  try {
    process.kill(state.pid, 0);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "EPERM") {
      return {
        found: false,
        stateFile,
        why: `${stateFile} names pid ${state.pid}, which is not running (left by a claimwatch that stopped)`,
      };
    }
  }
  return { found: true, pid: state.pid, url: state.url, stateFile };
}

/** The embedded Redis that a running `npm start` recorded, if its process is still alive. */
export function readEmbeddedState(dataDir: string): { pid: number; url: string } | undefined {
  const lookup = lookForEmbeddedRedis(dataDir);
  return lookup.found ? { pid: lookup.pid, url: lookup.url } : undefined;
}
