/**
 * What an operator must know about a Redis before trusting it with claims: is it reachable, will
 * it evict keys under memory pressure, does it persist, and what may a crash lose (durability). Managed Redis often disables CONFIG, so
 * everything that INFO can answer is read from INFO; only the RDB `save` schedule needs CONFIG.
 */
import type { Redis } from "ioredis";
import { describeRedisFailure } from "../redis/client";
import { REPLICA_WAIT_MS } from "../redis/replicas";

export type Persistence = "aof" | "rdb" | "none" | "unknown";

/**
 * What a crash of this Redis may lose (issue 14): `durable` = AOF with `appendfsync always`;
 * `replicated` = `min-replicas-to-write` ≥ 1 (a write needs a replica that acknowledged the
 * stream within `min-replicas-max-lag`; replication is still asynchronous, so a failover, e.g.
 * by Sentinel, may lose up to that lag); `lossy` = the last second (AOF everysec), everything
 * since the last snapshot (RDB only), or everything; `unknown` = CONFIG refused (managed Redis).
 * `detail` says which, for the banner. `problem`: the settings make this Redis refuse writes now
 * (fewer good replicas than `min-replicas-to-write`: every write answers NOREPLICAS).
 * `replicasInSync`: replicas past their initial sync (INFO replication `state=online`) that
 * acknowledged the stream within `IN_SYNC_LAG_S` — those a trigger's `WAIT` can count on; 0 for
 * a replica.
 */
export interface Durability {
  level: "durable" | "replicated" | "lossy" | "unknown";
  detail: string;
  problem?: string;
  replicasInSync: number;
}

export type RedisSafety =
  | { ok: true; version: string; evictionPolicy: string; persistence: Persistence; durability: Durability }
  | { ok: false; error: string };

type InspectClient = Pick<Redis, "pipeline">;

export function parseInfo(text: string): Map<string, string> {
  const fields = new Map<string, string>();
  for (const line of text.split(/\r?\n/)) {
    const colon = line.indexOf(":");
    if (colon > 0 && !line.startsWith("#")) fields.set(line.slice(0, colon), line.slice(colon + 1));
  }
  return fields;
}

/**
 * One round trip: INFO server/memory/persistence/replication + CONFIG GET save, appendfsync,
 * min-replicas-to-write and min-replicas-max-lag (CONFIG may be refused).
 */
export async function inspectRedis(client: InspectClient): Promise<RedisSafety> {
  let replies: Reply[] | null;
  try {
    replies = await client
      .pipeline()
      .info("server")
      .info("memory")
      .info("persistence")
      .info("replication")
      .config("GET", "save")
      .config("GET", "appendfsync")
      .config("GET", "min-replicas-to-write")
      .config("GET", "min-replicas-max-lag")
      .exec();
  } catch (error) {
    return { ok: false, error: describeRedisFailure(client, error) };
  }
  if (!replies || replies.length !== 8) return { ok: false, error: "no reply" };
  const [server, memory, persistence, replication, save, appendfsync, minReplicas, maxLag] = replies as Reply[] as [
    Reply,
    Reply,
    Reply,
    Reply,
    Reply,
    Reply,
    Reply,
    Reply,
  ];
  const infoError = [server, memory, persistence, replication].find(([error]) => error)?.[0];
  if (infoError) return { ok: false, error: describeRedisFailure(client, infoError) };

  const info = new Map([
    ...parseInfo(String(server[1])),
    ...parseInfo(String(memory[1])),
    ...parseInfo(String(persistence[1])),
    ...parseInfo(String(replication[1])),
  ]);
  const kind = persistenceOf(info, save);
  return {
    ok: true,
    version: info.get("redis_version") ?? "unknown",
    evictionPolicy: info.get("maxmemory_policy") ?? "unknown",
    persistence: kind,
    durability: durabilityOf(info, kind, configValue(appendfsync), {
      toWrite: configValue(minReplicas),
      maxLag: configValue(maxLag),
    }),
  };
}

/** The value of a `CONFIG GET name` reply, or `null` when CONFIG was refused. */
function configValue([error, reply]: Reply): string | null {
  if (error || !Array.isArray(reply) || reply.length < 2) return null;
  return String(reply[1]);
}

/**
 * Seconds since a replica's last acknowledgement (INFO's `lag`) up to which it counts as in sync:
 * replicas acknowledge every second, and a stopped or cut-off one falls behind from then on.
 */
const IN_SYNC_LAG_S = 2;

/** Replicas in sync (`slaveN:…,state=online,…,lag=L` lines of INFO replication, L ≤ IN_SYNC_LAG_S). */
function replicasInSyncOf(info: Map<string, string>): number {
  let inSync = 0;
  for (const [field, value] of info) {
    if (!/^slave\d+$/.test(field)) continue;
    const parts = new Map(value.split(",").map((part) => part.split("=", 2) as [string, string]));
    const lag = parts.get("lag") || "none";
    if (parts.get("state") === "online" && Number(lag) <= IN_SYNC_LAG_S) inSync += 1;
  }
  return inSync;
}

function durabilityOf(
  info: Map<string, string>,
  persistence: Persistence,
  appendfsync: string | null,
  minReplicas: { toWrite: string | null; maxLag: string | null },
): Durability {
  if (info.get("role") === "slave") {
    return { level: "lossy", detail: "a replica (read-only): claims must go to the primary", replicasInSync: 0 };
  }
  const replicasInSync = replicasInSyncOf(info);
  return { ...durabilityOfPrimary(info, persistence, appendfsync, minReplicas), replicasInSync };
}

function durabilityOfPrimary(
  info: Map<string, string>,
  persistence: Persistence,
  appendfsync: string | null,
  minReplicas: { toWrite: string | null; maxLag: string | null },
): Omit<Durability, "replicasInSync"> {
  const replicas = Number(info.get("connected_slaves") ?? "0");
  // A Sentinel-managed primary has replicas and no min-replicas by default: say what that costs.
  const failoverNote =
    replicas > 0
      ? `; ${replicas} asynchronous replica(s): a failover may lose the writes they had not received (min-replicas-to-write bounds that)`
      : "";
  const toWrite = Number(minReplicas.toWrite ?? "0");
  if (toWrite >= 1) {
    // INFO counts the replicas that acknowledged within the max lag when min-replicas is on.
    const good = Number(info.get("min_slaves_good_slaves") ?? replicas);
    const lag = minReplicas.maxLag ?? "?";
    const durability: Omit<Durability, "replicasInSync"> = {
      level: "replicated",
      detail:
        `min-replicas-to-write ${toWrite}, max lag ${lag} s (${good} of ${replicas} replica(s) good now): ` +
        `a write needs a replica that acknowledged within ${lag} s; replication is asynchronous, so a failover may lose up to that much`,
    };
    if (good < toWrite) {
      durability.problem = `only ${good} of the ${toWrite} replica(s) min-replicas-to-write asks for are in sync: every write is refused (NOREPLICAS)`;
    }
    return durability;
  }
  if (persistence === "aof" && appendfsync === "always") {
    return { level: "durable", detail: `AOF with appendfsync always${failoverNote}` };
  }
  if (persistence === "aof" && appendfsync !== null) {
    return {
      level: "lossy",
      detail: `AOF with appendfsync ${appendfsync}: a crash loses about the last second of writes${failoverNote}`,
    };
  }
  if (persistence === "rdb") {
    return {
      level: "lossy",
      detail: `RDB snapshots only: a crash loses every write since the last snapshot${failoverNote}`,
    };
  }
  if (persistence === "none") return { level: "lossy", detail: "no persistence: a restart loses everything" };
  return {
    level: "unknown",
    detail: `unknown (CONFIG refused: appendfsync and replicas cannot be read)${failoverNote}`,
  };
}

type Reply = [Error | null, unknown];

function persistenceOf(info: Map<string, string>, save: Reply): Persistence {
  if (info.get("aof_enabled") === "1") return "aof";
  const [error, reply] = save;
  if (error || !Array.isArray(reply)) return "unknown"; // CONFIG disabled or renamed
  const schedule = String(reply[1] ?? "").trim();
  return schedule === "" ? "none" : "rdb";
}

/** The reasons a Redis is unsafe for claims; empty when it is fine. Shared by API and banner. */
export function safetyProblems(label: string, safety: RedisSafety): string[] {
  if (!safety.ok) return [`${label} is unreachable: ${safety.error}`];
  const problems: string[] = [];
  if (safety.evictionPolicy !== "noeviction" && safety.evictionPolicy !== "unknown") {
    problems.push(
      `${label} uses maxmemory-policy ${safety.evictionPolicy}: locks can be evicted under memory pressure (set noeviction)`,
    );
  }
  if (safety.persistence === "none") {
    problems.push(`${label} has no persistence (neither AOF nor RDB): claims and run records vanish on restart`);
  }
  if (safety.durability.problem) problems.push(`${label}: ${safety.durability.problem}`);
  return problems;
}

/**
 * `CLAIMWATCH_TRIGGER_REPLICAS` asks more replicas than the main Redis has in sync: no trigger can
 * be answered queued. Each is `503 not-replicated` after a `REPLICA_WAIT_MS` WAIT that holds the
 * web server's shared connection (lib/redis/replicas.ts). Empty when the setting can be met, or
 * the main Redis did not answer (its own problem says so).
 */
export function triggerReplicaProblems(main: RedisSafety, triggerReplicas: number): string[] {
  if (triggerReplicas <= 0 || !main.ok) return [];
  const inSync = main.durability.replicasInSync;
  if (inSync >= triggerReplicas) return [];
  return [
    `CLAIMWATCH_TRIGGER_REPLICAS is ${triggerReplicas}, but the main Redis has ${inSync} replica(s) in sync: ` +
      `every rebuild request is answered 503 not-replicated after a ${REPLICA_WAIT_MS} ms wait ` +
      `(its job stays queued on the primary) until enough replicas are back, or the setting is lowered`,
  ];
}
