/**
 * Listing run records newest first, in pages, from the ZSET indexes: O(page) Redis work however
 * many records exist. One filter picks the index (rebuild+tenant, rebuild, status, or all); a
 * second filter (status within a rebuild) is applied while walking, bounded per request.
 */
import type { Redis } from "ioredis";
import type { RedisKeys } from "../redis/keys";
import { fromFields } from "./records";
import { RUN_ID_PATTERN, runIdOf, type RunRecord, type RunStatus } from "./types";

export interface RunFilter {
  rebuild?: string;
  tenant?: string;
  status?: RunStatus;
  jobId?: string;
}

export interface RunPage {
  runs: RunRecord[];
  nextCursor: string | null;
}

/** Index entries examined per request when a second filter has to be applied while walking. */
const WALK_LIMIT = 2_000;
/** Attempts of one job looked up by `jobId`. */
const MAX_ATTEMPTS_LOOKED_UP = 50;

type ListClient = Pick<Redis, "zrevrangebyscore" | "pipeline">;

/** Cursor: `<score>.<id>` of the last run of the previous page. */
function decodeCursor(cursor: string | undefined): { score: number; id: string } | null {
  if (!cursor) return null;
  const dot = cursor.indexOf(".");
  const score = Number(cursor.slice(0, dot));
  const id = cursor.slice(dot + 1);
  if (dot < 1 || !Number.isSafeInteger(score) || !RUN_ID_PATTERN.test(id)) return null;
  return { score, id };
}

export function isValidRunCursor(cursor: string): boolean {
  return decodeCursor(cursor) !== null;
}

export async function listRuns(
  client: ListClient,
  keys: RedisKeys,
  filter: RunFilter,
  limit: number,
  cursor?: string,
): Promise<RunPage> {
  if (filter.jobId) return listRunsOfJob(client, keys, filter, limit);
  const index = filter.rebuild
    ? keys.runIndex({ rebuild: filter.rebuild, ...(filter.tenant ? { tenant: filter.tenant } : {}) })
    : filter.status
      ? keys.runIndex({ status: filter.status })
      : keys.runIndex();
  const statusWhileWalking = filter.rebuild && filter.status ? filter.status : undefined;
  const tenantWhileWalking = !filter.rebuild && filter.tenant ? filter.tenant : undefined;

  let position = decodeCursor(cursor);
  const runs: RunRecord[] = [];
  let examined = 0;
  let exhausted = false;
  const filtering = Boolean(statusWhileWalking || tenantWhileWalking);
  walk: while (runs.length < limit && examined < WALK_LIMIT) {
    const want = filtering ? Math.min(500, WALK_LIMIT - examined) : limit - runs.length;
    // Inclusive of the cursor's score (ties are common at ms resolution); the overfetch covers them.
    const fetch = want + 50;
    const rows = await client.zrevrangebyscore(
      index,
      position ? String(position.score) : "+inf",
      "-inf",
      "WITHSCORES",
      "LIMIT",
      0,
      fetch,
    );
    const entries: { id: string; score: number }[] = [];
    for (let i = 0; i + 1 < rows.length; i += 2) entries.push({ id: rows[i]!, score: Number(rows[i + 1]) });
    // Equal scores come in reverse lexicographic order: skip up to and including the cursor.
    const after = position;
    const fresh = after
      ? entries.filter((e) => e.score < after.score || (e.score === after.score && e.id < after.id))
      : entries;
    const batch = fresh.slice(0, want);
    const lastBatch = rows.length / 2 < fetch && fresh.length <= want;
    if (batch.length === 0) {
      exhausted = true;
      break;
    }
    examined += batch.length;
    const pipeline = client.pipeline();
    for (const entry of batch) pipeline.hgetall(keys.run(entry.id));
    const replies = (await pipeline.exec()) ?? [];
    for (const [i, entry] of batch.entries()) {
      position = entry;
      const record = fromFields((replies[i]?.[1] as Record<string, string>) ?? {});
      if (!record) continue; // trimmed between the two reads
      if (statusWhileWalking && record.status !== statusWhileWalking) continue;
      if (tenantWhileWalking && record.tenant !== tenantWhileWalking) continue;
      runs.push(record);
      if (runs.length === limit) {
        exhausted = lastBatch && i === batch.length - 1;
        break walk;
      }
    }
    if (lastBatch) {
      exhausted = true;
      break;
    }
  }
  const nextCursor = !exhausted && position ? `${position.score}.${position.id}` : null;
  return { runs, nextCursor };
}

/** The attempts of one job: run ids are `<job>-a<n>`, looked up directly (no index walk). */
async function listRunsOfJob(client: ListClient, keys: RedisKeys, filter: RunFilter, limit: number): Promise<RunPage> {
  const pipeline = client.pipeline();
  for (let attempt = 1; attempt <= MAX_ATTEMPTS_LOOKED_UP; attempt++) {
    pipeline.hgetall(keys.run(runIdOf(filter.jobId!, attempt)));
  }
  const replies = (await pipeline.exec()) ?? [];
  const runs = replies
    .map(([, hash]) => fromFields((hash as Record<string, string>) ?? {}))
    .filter((run): run is RunRecord => run !== null)
    .filter(
      (run) => (!filter.rebuild || run.rebuild === filter.rebuild) && (!filter.status || run.status === filter.status),
    )
    .filter((run) => !filter.tenant || run.tenant === filter.tenant)
    .sort((a, b) => b.attempt - a.attempt)
    .slice(0, limit);
  return { runs, nextCursor: null };
}
