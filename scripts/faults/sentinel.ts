/**
 * A real Redis Sentinel group (failover: notes/faults.md): a primary, asynchronous replicas
 * (`--replicaof`; one unless asked for more) and three sentinels (quorum 2), all `redis-server` processes on loopback ports.
 * Sentinels run as `redis-server <conf> --sentinel`, what Debian's `redis-sentinel` runs.
 * Who starts the servers (and where their data lives, and who stops them) is the caller's:
 * tests use throw-away directories (test/support/sentinel.ts), the soak fixed ones it restarts.
 */
import { Redis } from "ioredis";
import type { RedisServerHandle } from "../../lib/redis/embedded";

/** Starts one server: a data node with these arguments, or a sentinel with these config lines. */
export type StartServer<S extends RedisServerHandle> = (
  extraArgs: string[],
  options: { sentinelConfig?: string[]; role: "primary" | "replica" | "sentinel" },
) => Promise<S>;

export interface SentinelGroup<S extends RedisServerHandle = RedisServerHandle> {
  name: string;
  primary: S;
  /** The first replica (of `replicas`). */
  replica: S;
  replicas: S[];
  sentinels: S[];
  /** `redis+sentinel://127.0.0.1:a,127.0.0.1:b,127.0.0.1:c/<name>` (DB 0). */
  url: string;
  /** The port the sentinels now name as the primary (asked of the first that answers). */
  primaryPort(): Promise<number | null>;
}

export interface SentinelGroupOptions {
  name?: string;
  /** Arguments for every data server (persistence …). */
  dataArgs?: string[];
  /** How many replicas (1). */
  replicas?: number;
  /** `sentinel down-after-milliseconds`: how long the primary must be silent to count as down. */
  downAfterMs?: number;
  /** `sentinel failover-timeout`. */
  failoverTimeoutMs?: number;
}

/** A plain client for looking at one server (no retries: a dead server fails at once). */
export function adminClient(server: { port: number }): Redis {
  const client = new Redis(server.port, "127.0.0.1", { maxRetriesPerRequest: 0, lazyConnect: false });
  client.on("error", () => {});
  return client;
}

export async function pollUntil<T>(what: string, timeoutMs: number, probe: () => Promise<T | null>): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  while (Date.now() < deadline) {
    try {
      const value = await probe();
      if (value !== null) return value;
    } catch (error) {
      lastError = error;
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`${what}: not within ${timeoutMs} ms${lastError ? ` (last error: ${String(lastError)})` : ""}`);
}

/** The primary's address as the first sentinel that answers names it; null when none answers. */
export async function askPrimaryPort(name: string, sentinels: { port: number }[]): Promise<number | null> {
  for (const sentinel of sentinels) {
    const client = adminClient(sentinel);
    try {
      const address = (await client.call("SENTINEL", "GET-MASTER-ADDR-BY-NAME", name)) as [string, string] | null;
      if (address) return Number(address[1]);
    } catch {
      // this sentinel is gone; ask the next
    } finally {
      client.disconnect();
    }
  }
  return null;
}

/** Waits until `server` says its link to its primary is up (a replica in sync). */
export async function untilInSync(server: { port: number }, timeoutMs = 30_000): Promise<void> {
  const client = adminClient(server);
  try {
    await pollUntil(`the replica on port ${server.port} is in sync`, timeoutMs, async () =>
      /master_link_status:up/.test(await client.info("replication")) ? true : null,
    );
  } finally {
    client.disconnect();
  }
}

export async function startSentinelGroup<S extends RedisServerHandle>(
  startServer: StartServer<S>,
  options: SentinelGroupOptions = {},
): Promise<SentinelGroup<S>> {
  const name = options.name ?? "cwtest";
  const dataArgs = options.dataArgs ?? [];
  const primary = await startServer(dataArgs, { role: "primary" });
  const replicas: S[] = [];
  for (let i = 0; i < (options.replicas ?? 1); i++) {
    replicas.push(
      await startServer([...dataArgs, "--replicaof", "127.0.0.1", String(primary.port)], { role: "replica" }),
    );
  }
  for (const replica of replicas) await untilInSync(replica);

  const sentinelConfig = [
    `sentinel monitor ${name} 127.0.0.1 ${primary.port} 2`,
    `sentinel down-after-milliseconds ${name} ${options.downAfterMs ?? 1_000}`,
    `sentinel failover-timeout ${name} ${options.failoverTimeoutMs ?? 5_000}`,
    `sentinel parallel-syncs ${name} 1`,
  ];
  const sentinels: S[] = [];
  for (let i = 0; i < 3; i++) sentinels.push(await startServer([], { sentinelConfig, role: "sentinel" }));

  // A failover needs a majority of sentinels that know each other and the replica: they learn
  // both from hello messages (every 2 s), so wait for that before handing the group out.
  for (const sentinel of sentinels) {
    const client = adminClient(sentinel);
    try {
      await pollUntil(`sentinel ${sentinel.port} knows the group`, 30_000, async () => {
        const peers = (await client.call("SENTINEL", "SENTINELS", name)) as unknown[];
        const known = (await client.call("SENTINEL", "REPLICAS", name)) as unknown[];
        return peers.length >= 2 && known.length >= replicas.length ? true : null;
      });
    } finally {
      client.disconnect();
    }
  }

  return {
    name,
    primary,
    replica: replicas[0]!,
    replicas,
    sentinels,
    url: `redis+sentinel://${sentinels.map((s) => `127.0.0.1:${s.port}`).join(",")}/${name}`,
    primaryPort: () => askPrimaryPort(name, sentinels),
  };
}
