/**
 * Listing run records newest first, in pages, from the ZSET indexes: O(page) Redis work however
 * many records exist. Every filter combination has its own index (see `keys.runIndex`), so a
 * page is one ZREVRANGEBYSCORE and one pipeline of HGETALLs. A tenant is always within a rebuild.
 */
import type { Redis } from "ioredis";
import type { RedisKeys } from "../redis/keys";
import { fromFields, UNLISTED_FIELD } from "./records";
import { RUN_ID_PATTERN, runIdOf, type RunRecord, type RunStatus } from "./types";

/** Most rebuilds one name search reads the runs of (one index each, merged per page). */
export const MAX_SEARCHED_REBUILDS = 50;

export interface RunFilter {
  rebuild?: string;
  /** Runs of any of these rebuilds (a name search; at most `MAX_SEARCHED_REBUILDS`), instead of `rebuild`. */
  rebuilds?: readonly string[];
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
  "id" | "status" | "reason" | "createdAt" | "startedAt" | "finishedAt" | "durationMs" | "closedAt"
>;
const SUMMARY_FIELDS = [
  "id",
  "status",
  "reason",
  "createdAt",
  "startedAt",
  "finishedAt",
  "durationMs",
  "closedAt",
] as const;

/**
 * The newest runs of a filter (no job id), as summaries: HMGET of eight fields per run instead of
 * the whole record (steps and all), for views that poll many rebuilds at once.
 */
export async function listRunSummaries(
  client: ListClient,
  keys: RedisKeys,
  filter: Omit<RunFilter, "jobId">,
  limit: number,
): Promise<RunSummary[]> {
  return (await listRunSummariesMany(client, keys, [filter], limit))[0]!;
}

/**
 * The newest runs of several filters at once (a page of the Rebuilds list): two pipelines in
 * all — one ZREVRANGEBYSCORE per filter, then one HMGET per run — not two round trips per filter.
 */
export async function listRunSummariesMany(
  client: ListClient,
  keys: RedisKeys,
  filters: readonly Omit<RunFilter, "jobId">[],
  limit: number,
): Promise<RunSummary[][]> {
  if (filters.length === 0) return [];
  const ranges = client.pipeline();
  for (const filter of filters) {
    ranges.zrevrangebyscore(indexOf(keys, filter), "+inf", "-inf", "LIMIT", 0, limit);
  }
  const ids = ((await ranges.exec()) ?? []).map(([error, reply]) => {
    if (error) throw error;
    return reply as string[];
  });
  const records = client.pipeline();
  for (const list of ids) for (const id of list) records.hmget(keys.run(id), ...SUMMARY_FIELDS);
  const replies = ids.some((list) => list.length > 0) ? ((await records.exec()) ?? []) : [];
  let next = 0;
  return ids.map((list) => {
    const summaries: RunSummary[] = [];
    for (let i = 0; i < list.length; i++) {
      const [error, reply] = replies[next++] ?? [null, null];
      if (error) throw error;
      const run = summaryOf((reply as (string | null)[] | null) ?? []); // null when trimmed between the reads
      if (run) summaries.push(run);
    }
    return summaries;
  });
}

function summaryOf(values: (string | null)[]): RunSummary | null {
  const hash: Record<string, string> = {};
  SUMMARY_FIELDS.forEach((field, i) => {
    if (values[i] !== null && values[i] !== undefined) hash[field] = values[i];
  });
  const run = fromFields(hash);
  if (!run) return null;
  const { id, status, reason, createdAt, startedAt, finishedAt, durationMs, closedAt } = run;
  return { id, status, reason, createdAt, startedAt, finishedAt, durationMs, ...(closedAt ? { closedAt } : {}) };
}

/** The index of a filter (every combination has its own, see `keys.runIndex`). */
function indexOf(keys: RedisKeys, filter: Omit<RunFilter, "jobId">): string {
  if (filter.tenant && !filter.rebuild) throw new RangeError("a tenant filter needs the rebuild it belongs to");
  return keys.runIndex({
    ...(filter.rebuild ? { rebuild: filter.rebuild } : {}),
    ...(filter.rebuild && filter.tenant ? { tenant: filter.tenant } : {}),
    ...(filter.status ? { status: filter.status } : {}),
  });
}

/**
 * One page of run ids from the filter's index, newest first, after `cursor`. With `rebuilds`
 * (a name search), one index per rebuild is read in one pipeline and the pages merged: O(number
 * of rebuilds × page), which is why a search is bounded to `MAX_SEARCHED_REBUILDS`.
 */
async function pageOfIndex(
  client: ListClient,
  keys: RedisKeys,
  filter: RunFilter,
  limit: number,
  cursor: string | undefined,
): Promise<{ page: { id: string; score: number }[]; nextCursor: string | null }> {
  const indexes = filter.rebuilds
    ? filter.rebuilds.map((rebuild) => indexOf(keys, { rebuild, ...(filter.status ? { status: filter.status } : {}) }))
    : [indexOf(keys, filter)];
  if (indexes.length > MAX_SEARCHED_REBUILDS) throw new RangeError(`more than ${MAX_SEARCHED_REBUILDS} rebuilds`);
  const after = decodeCursor(cursor);
  // Inclusive of the cursor's score (ties are common at ms resolution); the overfetch covers them.
  const fetch = limit + 1 + 50;
  const pipeline = client.pipeline();
  for (const index of indexes) {
    pipeline.zrevrangebyscore(index, after ? String(after.score) : "+inf", "-inf", "WITHSCORES", "LIMIT", 0, fetch);
  }
  const replies = indexes.length ? ((await pipeline.exec()) ?? []) : [];
  const entries: { id: string; score: number }[] = [];
  let full = false;
  for (const [error, reply] of replies) {
    if (error) throw error;
    const rows = reply as string[];
    if (rows.length / 2 >= fetch) full = true;
    for (let i = 0; i + 1 < rows.length; i += 2) {
      const entry = { id: rows[i]!, score: Number(rows[i + 1]) };
      // Equal scores come in reverse lexicographic order: skip up to and including the cursor.
      if (!after || entry.score < after.score || (entry.score === after.score && entry.id < after.id))
        entries.push(entry);
    }
  }
  // One index is already in this order; several are merged into it.
  if (indexes.length > 1) entries.sort((x, y) => y.score - x.score || (y.id < x.id ? -1 : y.id > x.id ? 1 : 0));
  const page = entries.slice(0, limit);
  const last = page[page.length - 1];
  const more = entries.length > limit || (full && page.length === limit);
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
    // Trimmed out of every list, kept only for a pickup that may wake (RUN_TRIM): not listed here either.
    .filter(([, hash]) => !(hash as Record<string, string> | null)?.[UNLISTED_FIELD])
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
