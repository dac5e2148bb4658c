/**
 * What an operator must know about a Redis before trusting it with claims: is it reachable, will
 * it evict keys under memory pressure, does it persist. Managed Redis often disables CONFIG, so
 * everything that INFO can answer is read from INFO; only the RDB `save` schedule needs CONFIG.
 */
import type { Redis } from "ioredis";
import { describeError } from "../describe-error";

export type Persistence = "aof" | "rdb" | "none" | "unknown";

export type RedisSafety =
  { ok: true; version: string; evictionPolicy: string; persistence: Persistence } | { ok: false; error: string };

type InspectClient = Pick<Redis, "pipeline">;

export function parseInfo(text: string): Map<string, string> {
  const fields = new Map<string, string>();
  for (const line of text.split(/\r?\n/)) {
    const colon = line.indexOf(":");
    if (colon > 0 && !line.startsWith("#")) fields.set(line.slice(0, colon), line.slice(colon + 1));
  }
  return fields;
}

/** One round trip: INFO server/memory/persistence + CONFIG GET save (may be refused). */
export async function inspectRedis(client: InspectClient): Promise<RedisSafety> {
  let replies: Reply[] | null;
  try {
    replies = await client.pipeline().info("server").info("memory").info("persistence").config("GET", "save").exec();
  } catch (error) {
    return { ok: false, error: describeError(error) };
  }
  if (!replies || replies.length !== 4) return { ok: false, error: "no reply" };
  const [server, memory, persistence, save] = replies as [Reply, Reply, Reply, Reply];
  const infoError = [server, memory, persistence].find(([error]) => error)?.[0];
  if (infoError) return { ok: false, error: describeError(infoError) };

  const info = new Map([
    ...parseInfo(String(server[1])),
    ...parseInfo(String(memory[1])),
    ...parseInfo(String(persistence[1])),
  ]);
  return {
    ok: true,
    version: info.get("redis_version") ?? "unknown",
    evictionPolicy: info.get("maxmemory_policy") ?? "unknown",
    persistence: persistenceOf(info, save),
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
  return problems;
}
