/**
 * A real Redis Sentinel group for tests: a primary, one replica (`--replicaof`) and three
 * sentinels (quorum 2), all `redis-server` processes on free loopback ports, each stopped by PID
 * when the test file ends (and SIGKILLed with the test process if it dies: `dieWithParent`).
 * Sentinels run as `redis-server <conf> --sentinel`, what Debian's `redis-sentinel` runs.
 */
import { Redis } from "ioredis";
import { startTestRedis, type TestRedis } from "./redis";

export interface SentinelGroup {
  name: string;
  primary: TestRedis;
  replica: TestRedis;
  sentinels: TestRedis[];
  /** `redis+sentinel://127.0.0.1:a,127.0.0.1:b,127.0.0.1:c/<name>` (DB 0). */
  url: string;
  /** The port the sentinels now name as the primary (asked of the first that answers). */
  primaryPort(): Promise<number | null>;
}

export interface SentinelGroupOptions {
  name?: string;
  /** Arguments for both data servers (persistence …). */
  dataArgs?: string[];
  /** `sentinel down-after-milliseconds`: how long the primary must be silent to count as down. */
  downAfterMs?: number;
  /** `sentinel failover-timeout`. */
  failoverTimeoutMs?: number;
}

/** A plain client for looking at one test server (no retries: a dead server fails at once). */
export function adminClient(server: TestRedis): Redis {
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

export async function startSentinelGroup(options: SentinelGroupOptions = {}): Promise<SentinelGroup> {
  const name = options.name ?? "cwtest";
  const dataArgs = options.dataArgs ?? [];
  const primary = await startTestRedis(dataArgs);
  const replica = await startTestRedis([...dataArgs, "--replicaof", "127.0.0.1", String(primary.port)]);
  const replicaClient = adminClient(replica);
  try {
    await pollUntil("the replica is in sync", 30_000, async () =>
      /master_link_status:up/.test(await replicaClient.info("replication")) ? true : null,
    );
  } finally {
    replicaClient.disconnect();
  }

  const sentinelConfig = [
    `sentinel monitor ${name} 127.0.0.1 ${primary.port} 2`,
    `sentinel down-after-milliseconds ${name} ${options.downAfterMs ?? 1_000}`,
    `sentinel failover-timeout ${name} ${options.failoverTimeoutMs ?? 5_000}`,
    `sentinel parallel-syncs ${name} 1`,
  ];
  const sentinels: TestRedis[] = [];
  for (let i = 0; i < 3; i++) sentinels.push(await startTestRedis([], { sentinelConfig }));

  // A failover needs a majority of sentinels that know each other and the replica: they learn
  // both from hello messages (every 2 s), so wait for that before handing the group out.
  for (const sentinel of sentinels) {
    const client = adminClient(sentinel);
    try {
      await pollUntil(`sentinel ${sentinel.port} knows the group`, 30_000, async () => {
        const peers = (await client.call("SENTINEL", "SENTINELS", name)) as unknown[];
        const replicas = (await client.call("SENTINEL", "REPLICAS", name)) as unknown[];
        return peers.length >= 2 && replicas.length >= 1 ? true : null;
      });
    } finally {
      client.disconnect();
    }
  }

  return {
    name,
    primary,
    replica,
    sentinels,
    url: `redis+sentinel://${sentinels.map((s) => `127.0.0.1:${s.port}`).join(",")}/${name}`,
    async primaryPort() {
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
    },
  };
}
