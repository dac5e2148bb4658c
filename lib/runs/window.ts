/**
 * Runs started in a time window, newest first, for the timeline and the duration trend: one
 * `ZREVRANGEBYSCORE` of one run index (global by default; a rebuild's, a status's — scored by the
 * attempt's start) with a cap, then one pipelined `HMGET` of the few fields a chart needs.
 * O(cap), independent of how many runs exist.
 */
import type { Redis } from "ioredis";
import type { RedisKeys } from "../redis/keys";
import type { RunRecord, RunStatus } from "./types";

export type WindowRun = Pick<
  RunRecord,
  "id" | "rebuild" | "tenant" | "status" | "createdAt" | "startedAt" | "finishedAt" | "durationMs"
>;

const FIELDS = ["id", "rebuild", "tenant", "status", "createdAt", "startedAt", "finishedAt", "durationMs"] as const;
const num = (raw: string | null | undefined) => (raw === null || raw === undefined || raw === "" ? null : Number(raw));

export async function listRunsInWindow(
  client: Pick<Redis, "zrevrangebyscore" | "pipeline">,
  keys: RedisKeys,
  since: number,
  until: number,
  limit: number,
  filter: Parameters<RedisKeys["runIndex"]>[0] = {},
): Promise<{ runs: WindowRun[]; truncated: boolean }> {
  const ids = await client.zrevrangebyscore(keys.runIndex(filter), until, since, "LIMIT", 0, limit + 1);
  const truncated = ids.length > limit;
  const page = ids.slice(0, limit);
  if (page.length === 0) return { runs: [], truncated };
  const pipeline = client.pipeline();
  for (const id of page) pipeline.hmget(keys.run(id), ...FIELDS);
  const replies = (await pipeline.exec()) ?? [];
  const runs: WindowRun[] = [];
  for (const [error, reply] of replies) {
    const values = error ? null : (reply as (string | null)[]);
    if (!values?.[0]) continue; // trimmed between the two reads
    runs.push({
      id: values[0],
      rebuild: values[1] ?? "",
      tenant: values[2] || null,
      status: (values[3] || "queued") as RunStatus,
      createdAt: Number(values[4] ?? 0),
      startedAt: num(values[5]),
      finishedAt: num(values[6]),
      durationMs: num(values[7]),
    });
  }
  return { runs, truncated };
}
