/**
 * Listing run records newest first, in pages, from the ZSET indexes: O(page) Redis work however
 * many records exist. Every filter combination has its own index (see `keys.runIndex`), so a
 * page is one ZREVRANGEBYSCORE and one pipeline of HGETALLs. A tenant is always within a rebuild.
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
  const { page, nextCursor } = await pageOfIndex(client, keys, filter, limit, cursor);
  const pipeline = client.pipeline();
  for (const entry of page) pipeline.hgetall(keys.run(entry.id));
  const replies = page.length ? ((await pipeline.exec()) ?? []) : [];
  const runs = page
    .map((_, i) => fromFields((replies[i]?.[1] as Record<string, string>) ?? {}))
    .filter((run): run is RunRecord => run !== null); // trimmed between the two reads
  return { runs, nextCursor };
}

/** What a sparkline or a "last run" cell shows of a run. */
export type RunSummary = Pick<
  RunRecord,
  "id" | "status" | "reason" | "createdAt" | "startedAt" | "finishedAt" | "durationMs"
>;
const SUMMARY_FIELDS = ["id", "status", "reason", "createdAt", "startedAt", "finishedAt", "durationMs"] as const;

/**
 * The newest runs of a filter (no job id), as summaries: HMGET of six fields per run instead of
 * the whole record (steps and all), for views that poll many rebuilds at once.
 */
export async function listRunSummaries(
  client: ListClient,
  keys: RedisKeys,
  filter: Omit<RunFilter, "jobId">,
  limit: number,
): Promise<RunSummary[]> {
  const { page } = await pageOfIndex(client, keys, filter, limit, undefined);
  const pipeline = client.pipeline();
  for (const entry of page) pipeline.hmget(keys.run(entry.id), ...SUMMARY_FIELDS);
  const replies = page.length ? ((await pipeline.exec()) ?? []) : [];
  const summaries: RunSummary[] = [];
  for (const [, reply] of replies) {
    const values = (reply as (string | null)[] | undefined) ?? [];
    const hash: Record<string, string> = {};
    SUMMARY_FIELDS.forEach((field, i) => {
      if (values[i] !== null && values[i] !== undefined) hash[field] = values[i];
    });
    const run = fromFields(hash); // null when trimmed between the two reads
    if (run) {
      const { id, status, reason, createdAt, startedAt, finishedAt, durationMs } = run;
      summaries.push({ id, status, reason, createdAt, startedAt, finishedAt, durationMs });
    }
  }
  return summaries;
}

/** One page of run ids from the filter's index, newest first, after `cursor`. */
async function pageOfIndex(
  client: ListClient,
  keys: RedisKeys,
  filter: RunFilter,
  limit: number,
  cursor: string | undefined,
): Promise<{ page: { id: string; score: number }[]; nextCursor: string | null }> {
  if (filter.tenant && !filter.rebuild) throw new RangeError("a tenant filter needs the rebuild it belongs to");
  const index = keys.runIndex({
    ...(filter.rebuild ? { rebuild: filter.rebuild } : {}),
    ...(filter.rebuild && filter.tenant ? { tenant: filter.tenant } : {}),
    ...(filter.status ? { status: filter.status } : {}),
  });
  const after = decodeCursor(cursor);
  // Inclusive of the cursor's score (ties are common at ms resolution); the overfetch covers them.
  const fetch = limit + 1 + 50;
  const rows = await client.zrevrangebyscore(
    index,
    after ? String(after.score) : "+inf",
    "-inf",
    "WITHSCORES",
    "LIMIT",
    0,
    fetch,
  );
  const entries: { id: string; score: number }[] = [];
  for (let i = 0; i + 1 < rows.length; i += 2) {
    const entry = { id: rows[i]!, score: Number(rows[i + 1]) };
    // Equal scores come in reverse lexicographic order: skip up to and including the cursor.
    if (!after || entry.score < after.score || (entry.score === after.score && entry.id < after.id))
      entries.push(entry);
  }
  const page = entries.slice(0, limit);
  const last = page[page.length - 1];
  const more = entries.length > limit || (rows.length / 2 >= fetch && page.length === limit);
  return { page, nextCursor: more && last ? `${last.score}.${last.id}` : null };
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
