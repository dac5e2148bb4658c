/**
 * Timeline backfill: counts, once, the final run records no counter script has counted — the
 * history written before the timeline counters existed (an upgrade), and runs finished meanwhile
 * by workers of an older version.
 *
 * "Counted" is known from the record itself: the script that counts a record sets its
 * `TIMELINE_COUNTED_FIELD` in the same atomic step (the record scripts' `countFinal`, and
 * `TIMELINE_COUNT_RECORD` here and for seeded history), and `TIMELINE_COUNT_RECORD` counts only a
 * final record without it. So a record is counted at most once whoever gets there first — two
 * backfills at once, a backfill and the worker finishing that run, a backfill interrupted and
 * started again — and at least once: a record still in flight is left to the script that
 * finishes it. (A durable "counted up to" time alone could not tell a run finished by a worker
 * without the counters just after it from one the counters saw; a per-record marker needs no clock.)
 *
 * Where to start is a durable cursor (`keys.timelineBackfill`): an index score below which every
 * record is final and counted. A pass walks the global run index upwards from it in batches of
 * `batch` (one ZRANGEBYSCORE, one pipeline of HMGETs, one pipeline of scripts for the records to
 * count: never one long call), and after each batch raises the cursor to the lowest record it saw
 * in flight, or to where it got. Raising only (`TIMELINE_BACKFILL_CURSOR`) keeps it true with
 * passes in several processes: each value written is true on its own. So the first pass after an
 * upgrade reads every record once; later ones (every start of a web server or worker) read only
 * the runs since the previous pass's oldest run in flight.
 */
import type { Redis } from "ioredis";
import type { RedisKeys } from "../redis/keys";
import { RUN_REPLY } from "../redis/replies";
import { queueVariadicScript, runScript, scriptPipeline, type ScriptingPipelineClient } from "../redis/scripts";
import { runPlaceOf, type RunRetention } from "./records";
import {
  TIMELINE_BACKFILL_CURSOR,
  TIMELINE_COUNT_RECORD,
  TIMELINE_COUNTED_FIELD,
  timelineCountCall,
} from "./timeline-counters";
import { isFinalStatus } from "./transitions";

type BackfillClient = ScriptingPipelineClient & Pick<Redis, "get" | "zrangebyscore">;

export interface BackfillOptions {
  retention: RunRetention;
  /** Records read per batch. */
  batch?: number;
  /** Pause between batches (ms), so a long first pass leaves Redis to everyone else. */
  pauseMs?: number;
  /** Stops after the current batch (the cursor says where the next pass resumes). */
  signal?: AbortSignal;
}

export interface BackfillResult {
  /** Records this pass counted. */
  counted: number;
  /** Final records found counted already (by their script, seeding or another pass). */
  alreadyCounted: number;
  /** Records still queued or running: counted by the script that finishes them. */
  inFlight: number;
  /** Index entries whose record is gone (trimmed or expired): nothing to count. */
  missing: number;
  /** Index entries read. */
  scanned: number;
  /** The cursor the pass started from (null: the first pass) and the one it left. */
  from: number | null;
  to: number | null;
  /** False when stopped by `signal` before the end of the index. */
  complete: boolean;
}

/** One pass over the run records above the cursor; see the file's comment. */
export async function backfillTimeline(
  client: BackfillClient,
  keys: RedisKeys,
  options: BackfillOptions,
): Promise<BackfillResult> {
  const batch = options.batch ?? 500;
  const index = keys.runIndex();
  const stored = await client.get(keys.timelineBackfill);
  const from = stored === null ? null : Number(stored);
  const result: BackfillResult = {
    counted: 0,
    alreadyCounted: 0,
    inFlight: 0,
    missing: 0,
    scanned: 0,
    from,
    to: from,
    complete: false,
  };
  let lowestInFlight = Infinity;
  // Where the next batch starts (inclusive) and the ids already read at exactly that score.
  let score = from ?? -Infinity;
  let seenAtScore = new Set<string>();
  let count = batch;
  for (;;) {
    if (options.signal?.aborted) return result;
    const asked = count;
    const reply = await client.zrangebyscore(
      index,
      Number.isFinite(score) ? score : "-inf",
      "+inf",
      "WITHSCORES",
      "LIMIT",
      0,
      asked,
    );
    const entries: { id: string; score: number }[] = [];
    for (let i = 0; i < reply.length; i += 2) {
      const entry = { id: reply[i]!, score: Number(reply[i + 1]) };
      if (entry.score === score && seenAtScore.has(entry.id)) continue;
      entries.push(entry);
    }
    if (entries.length === 0) {
      // Every entry returned was read before: more than `count` runs share one start.
      if (reply.length / 2 < asked) break;
      count *= 2;
      continue;
    }
    count = batch;
    await countBatch(
      client,
      keys,
      options.retention,
      entries,
      result,
      (s) => (lowestInFlight = Math.min(lowestInFlight, s)),
    );
    const last = entries[entries.length - 1]!.score;
    if (last !== score) seenAtScore = new Set();
    for (const entry of entries) if (entry.score === last) seenAtScore.add(entry.id);
    score = last;
    result.to = await raiseCursor(client, keys, Math.min(lowestInFlight, score));
    if (reply.length / 2 < asked) break;
    if (options.pauseMs) await new Promise((resolve) => setTimeout(resolve, options.pauseMs));
  }
  result.complete = true;
  return result;
}

/** Reads a batch's records (status, place, marker) and counts the final ones not counted yet. */
async function countBatch(
  client: BackfillClient,
  keys: RedisKeys,
  retention: RunRetention,
  entries: { id: string; score: number }[],
  result: BackfillResult,
  noteInFlight: (score: number) => void,
): Promise<void> {
  result.scanned += entries.length;
  const lookup = client.pipeline();
  for (const { id } of entries) lookup.hmget(keys.run(id), "status", "rebuild", "tenant", TIMELINE_COUNTED_FIELD);
  const records = (await lookup.exec()) ?? [];
  const pipeline = scriptPipeline(client, [TIMELINE_COUNT_RECORD]);
  const queued: { id: string; score: number }[] = [];
  entries.forEach((entry, i) => {
    const [error, fields] = records[i] ?? [];
    if (error) throw error;
    const [status, rebuild, tenant, counted] = fields as (string | null)[];
    if (!status) result.missing += 1;
    else if (counted) result.alreadyCounted += 1;
    else if (!isFinalStatus(status)) {
      result.inFlight += 1;
      noteInFlight(entry.score);
    } else {
      const call = timelineCountCall(keys, runPlaceOf(rebuild, tenant), retention, entry.id, entry.score);
      queueVariadicScript(pipeline, TIMELINE_COUNT_RECORD, [call.keys[0]!], call.keys.slice(1), call.args);
      queued.push(entry);
    }
  });
  if (queued.length === 0) return;
  const replies = (await pipeline.exec()) ?? [];
  queued.forEach((entry, i) => {
    const [error, code] = replies[i] ?? [];
    if (error) throw error;
    if (code === RUN_REPLY.written) result.counted += 1;
    else if (code === RUN_REPLY.no) result.alreadyCounted += 1;
    else if (code === RUN_REPLY.missing) result.missing += 1;
    else throw new Error(`${TIMELINE_COUNT_RECORD.command}: unexpected reply ${String(code)} for run ${entry.id}`);
  });
}

/** Raises the durable cursor to `score` (never lowers it); returns the cursor now stored. */
async function raiseCursor(client: BackfillClient, keys: RedisKeys, score: number): Promise<number | null> {
  if (!Number.isFinite(score)) return null;
  const stored = await runScript(client, TIMELINE_BACKFILL_CURSOR, [keys.timelineBackfill], [score]);
  return Number(stored);
}

/**
 * One pass in the background, as a web server or worker starts: retried (with backoff, up to
 * `attempts` times) while Redis is unreachable, logged in one line when it counted something,
 * stopped by `signal` (the cursor keeps what was done). Resolves to the pass's result, or null.
 */
export async function startTimelineBackfill(
  client: BackfillClient,
  keys: RedisKeys,
  options: BackfillOptions & { log: (line: string) => void; attempts?: number },
): Promise<BackfillResult | null> {
  const { log, attempts = 8, ...pass } = options;
  let delayMs = 2_000;
  for (let attempt = 1; attempt <= attempts; attempt++) {
    if (pass.signal?.aborted) return null;
    try {
      const started = performance.now();
      const result = await backfillTimeline(client, keys, { pauseMs: 5, ...pass });
      if (result.counted > 0 || !result.complete) {
        log(
          `timeline backfill: counted ${result.counted} finished run(s) from before the timeline counters ` +
            `(${result.scanned} read, ${result.alreadyCounted} counted already, ${result.inFlight} in flight) ` +
            `in ${((performance.now() - started) / 1000).toFixed(1)} s${result.complete ? "" : "; stopped, resumes at the next start"}`,
        );
      }
      return result;
    } catch (error) {
      if (attempt === attempts) {
        log(`timeline backfill failed (tries again at the next start): ${(error as Error).message}`);
        return null;
      }
      await new Promise((resolve) => setTimeout(resolve, delayMs).unref());
      delayMs = Math.min(delayMs * 2, 60_000);
    }
  }
  return null;
}
