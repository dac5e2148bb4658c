/**
 * The timeline backfill against a real Redis: history written before the counters existed (the
 * records and indexes `importRunInto` writes, without the count) is counted once, matching a
 * recount from the records; a second pass, passes in parallel, a pass interrupted and started
 * again, and runs finishing through the record scripts during a pass count nothing twice. Every
 * branch of TIMELINE_COUNT_RECORD and TIMELINE_BACKFILL_CURSOR.
 */
import assert from "node:assert/strict";
import { after, test } from "node:test";
import { Redis } from "ioredis";
import { redisKeys, type RedisKeys } from "../../lib/redis/keys";
import { RUN_REPLY } from "../../lib/redis/replies";
import { runScript, runVariadicScript } from "../../lib/redis/scripts";
import { readTimelineBuckets, type TimelineBucket } from "../../lib/runs/buckets";
import { DEFAULT_RETENTION, runPlaceOf } from "../../lib/runs/records";
import { backfillTimeline, startTimelineBackfill, type BackfillResult } from "../../lib/runs/timeline-backfill";
import {
  TIMELINE_BACKFILL_CURSOR,
  TIMELINE_BUCKET_MS,
  TIMELINE_COUNT_RECORD,
  TIMELINE_COUNTED_FIELD,
  bucketStartOf,
  timelineCountCall,
} from "../../lib/runs/timeline-counters";
import { isFinalStatus, type FinalRunStatus } from "../../lib/runs/transitions";
import type { RunRecord, RunStatus } from "../../lib/runs/types";
import { beginAttempt, importRunInto, writeRun, type AttemptIdentity } from "../../lib/runs/writer";
import { startTestRedis, stopTestRedis, uniquePrefix } from "../support/redis";

const server = await startTestRedis();
const client = new Redis(server.url);
const others = [new Redis(server.url), new Redis(server.url), new Redis(server.url)];
after(async () => {
  for (const c of [client, ...others]) c.disconnect();
  await stopTestRedis(server);
});

const retention = DEFAULT_RETENTION;
const HOUR = TIMELINE_BUCKET_MS;
const now = Date.now();
const firstHour = bucketStartOf(now) - 30 * HOUR;
const SINCE = firstHour - HOUR;
const UNTIL = now + HOUR;

const STATUSES: RunStatus[] = ["rebuilt", "skipped", "failed", "aborted", "cancelled", "running"];
const PLACES = [
  { rebuild: "tiles", tenant: "acme" },
  { rebuild: "tiles", tenant: "globex" },
  { rebuild: "tiles", tenant: null },
  { rebuild: "reports", tenant: null },
  { rebuild: "not a rebuild!", tenant: "x" },
];

/** `n` records spread over 30 hours, places and statuses (some still running), some sharing a start. */
function history(n: number): RunRecord[] {
  return Array.from({ length: n }, (_, i) => {
    const place = PLACES[i % PLACES.length]!;
    const status = STATUSES[Math.floor(i / PLACES.length) % STATUSES.length]!;
    // Every fourth record starts at the same ms as the one before: ties in the index.
    const startedAt = firstHour + (((i - (i % 4 === 3 ? 1 : 0)) * 7_919_003) % (30 * HOUR));
    const durationMs = status === "running" ? null : 1_000 + i;
    return {
      id: `old-${i}-a1`,
      jobId: `old-${i}`,
      attempt: 1,
      rebuild: place.rebuild,
      tenant: place.tenant,
      version: null,
      status,
      reason: null,
      trigger: "schedule",
      workerId: "w-old",
      host: "h",
      createdAt: startedAt - 5,
      startedAt,
      finishedAt: durationMs === null ? null : startedAt + durationMs,
      durationMs,
      fence: null,
      buildHash: null,
      idempotencyKey: null,
      progress: 1,
      steps: [],
    };
  });
}

/** Writes `records` as a version without the counters did: records and indexes, no count, no marker. */
async function writeOldHistory(keys: RedisKeys, records: RunRecord[]): Promise<void> {
  const tx = client.multi();
  for (const r of records) {
    importRunInto(tx, keys, r as RunRecord & { status: FinalRunStatus }, retention, { uncounted: true });
  }
  await tx.exec();
}

type Flat = Record<string, { counts: Record<string, number>; durationMs: Record<string, number> }>;

const flat = (buckets: TimelineBucket[]): Flat =>
  Object.fromEntries(
    buckets.map((b) => [
      `${b.tenant ? `${b.rebuild}/${b.tenant}` : b.rebuild}@${b.start}`,
      { counts: b.counts as Record<string, number>, durationMs: b.durationMs as Record<string, number> },
    ]),
  );

/** The counters' truth, recounted from the records that exist now (final ones), at one level. */
async function recount(keys: RedisKeys, level: { rebuild?: string }): Promise<Flat> {
  const ids = await client.zrange(keys.runIndex(), "0", "-1", "WITHSCORES");
  const out: Flat = {};
  for (let i = 0; i < ids.length; i += 2) {
    const hash = await client.hgetall(keys.run(ids[i]!));
    if (!hash.status || !isFinalStatus(hash.status)) continue;
    const place = runPlaceOf(hash.rebuild, hash.tenant);
    if (level.rebuild && place.rebuild !== level.rebuild) continue;
    const lane = level.rebuild
      ? place.tenant
        ? `${place.rebuild}/${place.tenant}`
        : place.rebuild
      : (place.rebuild ?? "");
    const key = `${lane}@${bucketStartOf(Number(ids[i + 1]))}`;
    const entry = (out[key] ??= { counts: {}, durationMs: {} });
    entry.counts[hash.status] = (entry.counts[hash.status] ?? 0) + 1;
    entry.durationMs[hash.status] = (entry.durationMs[hash.status] ?? 0) + Number(hash.durationMs || 0);
  }
  return out;
}

async function assertCountersMatchRecords(keys: RedisKeys): Promise<void> {
  const window = { since: SINCE, until: UNTIL, bucketMs: HOUR };
  assert.deepEqual(flat(await readTimelineBuckets(client, keys, window)), await recount(keys, {}));
  for (const rebuild of ["tiles", "reports"]) {
    assert.deepEqual(
      flat(await readTimelineBuckets(client, keys, { ...window, rebuild })),
      await recount(keys, { rebuild }),
      rebuild,
    );
  }
}

const finals = (records: RunRecord[]) => records.filter((r) => isFinalStatus(r.status)).length;

test("history from before the counters: one pass counts every final record once, as a recount says", async () => {
  const keys = redisKeys(uniquePrefix("tlb"));
  const records = history(120);
  await writeOldHistory(keys, records);
  // A record whose hash is gone while its index entry stays (expired): nothing to count.
  await client.del(keys.run(records[0]!.id));
  assert.deepEqual(await readTimelineBuckets(client, keys, { since: SINCE, until: UNTIL, bucketMs: HOUR }), []);

  const first = await backfillTimeline(client, keys, { retention, batch: 7 });
  assert.equal(first.complete, true);
  assert.equal(first.scanned, 120);
  assert.equal(first.missing, 1);
  assert.equal(first.counted, finals(records.slice(1)));
  assert.equal(first.inFlight, records.filter((r) => r.status === "running").length);
  assert.equal(first.alreadyCounted, 0);
  await assertCountersMatchRecords(keys);
  // The cursor stops at the oldest run in flight: it is read again by the next pass.
  const oldestRunning = Math.min(...records.filter((r) => r.status === "running").map((r) => r.startedAt!));
  assert.equal(first.to, oldestRunning);
  assert.equal(Number(await client.get(keys.timelineBackfill)), oldestRunning);

  // Run twice: nothing more is counted, and only the records from the cursor on are read.
  const second = await backfillTimeline(client, keys, { retention, batch: 7 });
  assert.equal(second.counted, 0);
  assert.equal(second.from, oldestRunning);
  assert.ok(second.scanned < first.scanned, `${second.scanned} < ${first.scanned}`);
  await assertCountersMatchRecords(keys);
});

test("passes in several processes at once count each record once", async () => {
  const keys = redisKeys(uniquePrefix("tlb"));
  const records = history(300);
  await writeOldHistory(keys, records);
  const results = await Promise.all(
    [client, ...others].map((c, i) => backfillTimeline(c, keys, { retention, batch: 5 + i * 3 })),
  );
  assert.equal(
    results.reduce((sum, r) => sum + r.counted, 0),
    finals(records),
  );
  await assertCountersMatchRecords(keys);
});

test("a pass stopped after two batches resumes from its cursor; the two count each record once", async () => {
  const keys = redisKeys(uniquePrefix("tlb"));
  // Only final records, so the cursor follows the pass.
  const records = history(90).filter((r) => isFinalStatus(r.status));
  await writeOldHistory(keys, records);
  const stop = new AbortController();
  let reads = 0;
  // The client as the pass sees it; its second index read stops the pass after that batch.
  const stopping = new Proxy(client, {
    get(target, name, receiver) {
      if (name === "zrangebyscore") {
        return (...args: unknown[]) => {
          if (++reads === 2) stop.abort();
          return (target.zrangebyscore as (...a: unknown[]) => Promise<string[]>)(...args);
        };
      }
      const value = Reflect.get(target, name, receiver) as unknown;
      return typeof value === "function" ? (value as (...a: unknown[]) => unknown).bind(target) : value;
    },
  });
  const interrupted = await backfillTimeline(stopping, keys, { retention, batch: 10, signal: stop.signal });
  assert.equal(interrupted.complete, false);
  // Two batches of 10 read (less what the second read again: ties at the first's last start).
  assert.ok(interrupted.scanned > 10 && interrupted.scanned <= 20, String(interrupted.scanned));
  assert.equal(interrupted.counted, interrupted.scanned);
  const resumed = await backfillTimeline(client, keys, { retention, batch: 10 });
  assert.equal(resumed.from, interrupted.to);
  assert.equal(resumed.complete, true);
  assert.equal(interrupted.counted + resumed.counted, records.length);
  await assertCountersMatchRecords(keys);
});

function identity(jobId: string): AttemptIdentity {
  return {
    runId: `${jobId}-a1`,
    jobId,
    attempt: 1,
    previousRunId: null,
    rebuild: "tiles",
    tenant: "acme",
    rebuildName: "tiles",
    createdAt: now,
    trigger: "api",
    workerId: "w-new",
    host: "h",
  };
}

test("runs finishing through the record scripts before, during and after a pass are counted once", async () => {
  const keys = redisKeys(uniquePrefix("tlb"));
  const store = { client, keys, retention };
  await writeOldHistory(keys, history(60));
  // Finished by the new scripts before the pass: counted and marked by them.
  const early = identity("new-early");
  await beginAttempt(store, early, { mode: { kind: "running" } });
  await writeRun(store, early, { status: "rebuilt" });
  assert.equal(await client.hget(keys.run(early.runId), TIMELINE_COUNTED_FIELD), "1");
  // Still running when the pass reads it, finished after its batch: left to the script.
  const during = identity("new-during");
  await beginAttempt(store, during, { mode: { kind: "running" } });
  const late = identity("new-late");
  await beginAttempt(store, late, { mode: { kind: "running" } });

  let finishedDuring = false;
  const passClient = new Proxy(client, {
    get(target, name, receiver) {
      if (name === "pipeline") {
        // The first pipeline after the pass read `during` as running: finish it then.
        return () => {
          const pipeline = target.pipeline();
          if (!finishedDuring) {
            finishedDuring = true;
            const exec = pipeline.exec.bind(pipeline);
            return Object.assign(pipeline, {
              exec: async () => {
                const replies = await exec();
                await writeRun(store, during, { status: "failed" });
                return replies;
              },
            });
          }
          return pipeline;
        };
      }
      const value = Reflect.get(target, name, receiver) as unknown;
      return typeof value === "function" ? (value as (...a: unknown[]) => unknown).bind(target) : value;
    },
  });
  const result: BackfillResult = await backfillTimeline(passClient, keys, { retention, batch: 500 });
  assert.equal(finishedDuring, true);
  await writeRun(store, late, { status: "skipped" });
  assert.equal(result.complete, true);
  // The pass counted none of the three: two were marked, one was in flight when read.
  assert.equal(result.inFlight, history(60).filter((r) => r.status === "running").length + 2);
  await backfillTimeline(client, keys, { retention });
  await assertCountersMatchRecords(keys);
  const tenants = flat(
    await readTimelineBuckets(client, keys, { since: SINCE, until: UNTIL, bucketMs: HOUR, rebuild: "tiles" }),
  );
  // The three new runs are the only ones of tiles/acme after the history's 30 hours.
  const newRuns = Object.entries(tenants)
    .filter(([lane]) => lane.startsWith("tiles/acme@") && Number(lane.split("@")[1]) >= firstHour + 30 * HOUR)
    .map(([, bucket]) => bucket.counts);
  assert.deepEqual(
    newRuns.reduce(
      (sum, counts) => ({
        ...sum,
        ...Object.fromEntries(Object.entries(counts).map(([s, n]) => [s, (sum[s] ?? 0) + n])),
      }),
      {} as Record<string, number>,
    ),
    { rebuilt: 1, failed: 1, skipped: 1 },
  );
});

test("TIMELINE_COUNT_RECORD: counted, counted already, not final, missing; the cursor only rises", async () => {
  const keys = redisKeys(uniquePrefix("tlb"));
  const [done, running] = history(6).filter((_, i) => i === 0 || i === 5);
  const records = [
    { ...done!, status: "rebuilt" as const },
    { ...running!, status: "running" as const },
  ];
  await writeOldHistory(keys, records);
  const call = (r: RunRecord) => {
    const c = timelineCountCall(keys, runPlaceOf(r.rebuild, r.tenant), retention, r.id, r.startedAt!);
    return runVariadicScript(client, TIMELINE_COUNT_RECORD, [c.keys[0]!], c.keys.slice(1), c.args);
  };
  assert.equal(await call(records[0]!), RUN_REPLY.written);
  assert.equal(await call(records[0]!), RUN_REPLY.no);
  assert.equal(await call(records[1]!), RUN_REPLY.notFinal);
  assert.equal(await call({ ...records[0]!, id: "never-written-a1" }), RUN_REPLY.missing);
  await assertCountersMatchRecords(keys);

  assert.equal(await runScript(client, TIMELINE_BACKFILL_CURSOR, [keys.timelineBackfill], [500]), "500");
  assert.equal(await runScript(client, TIMELINE_BACKFILL_CURSOR, [keys.timelineBackfill], [400]), "500");
  assert.equal(await runScript(client, TIMELINE_BACKFILL_CURSOR, [keys.timelineBackfill], [600]), "600");
  assert.equal(await client.get(keys.timelineBackfill), "600");
});

test("as a process starts: one pass, one log line when it counted something, none when nothing was left", async () => {
  const keys = redisKeys(uniquePrefix("tlb"));
  const records = history(30).filter((r) => isFinalStatus(r.status));
  await writeOldHistory(keys, records);
  const lines: string[] = [];
  const log = (line: string) => lines.push(line);
  const result = await startTimelineBackfill(client, keys, { retention, log });
  assert.equal(result?.counted, records.length);
  assert.equal(lines.length, 1);
  assert.match(lines[0]!, new RegExp(`^timeline backfill: counted ${records.length} finished run\\(s\\) `));
  assert.equal((await startTimelineBackfill(client, keys, { retention, log }))?.counted, 0);
  assert.equal(lines.length, 1);
  // Stopped before it began (a worker shutting down): nothing read, nothing logged.
  const stopped = new AbortController();
  stopped.abort();
  assert.equal(await startTimelineBackfill(client, keys, { retention, log, signal: stopped.signal }), null);
  assert.equal(lines.length, 1);
});

test("more runs sharing one start than a batch holds are all read, once", async () => {
  const keys = redisKeys(uniquePrefix("tlb"));
  const records = history(25)
    .filter((r) => isFinalStatus(r.status))
    .map((r) => ({ ...r, startedAt: firstHour + 5, createdAt: firstHour }));
  await writeOldHistory(keys, records);
  const result = await backfillTimeline(client, keys, { retention, batch: 4 });
  assert.equal(result.scanned, records.length);
  assert.equal(result.counted, records.length);
  await assertCountersMatchRecords(keys);
});
