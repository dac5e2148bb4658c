/**
 * Timeline counters against a real Redis: every way a record reaches a final status (a write, a
 * final begin, an already-rebuilt skip, the next attempt closing the previous one, an abandon,
 * the sweep) counts the run once, in the hour of its start, per rebuild and per tenant, with its
 * duration; nothing counts twice (late writes, a second abandon, a begin of an existing id);
 * trimming leaves the counters as they are (they are history) and a write to a trimmed record
 * counts nothing; seeded history (`importRunInto`) counts the same way; the reader merges hours.
 */
import assert from "node:assert/strict";
import { after, test } from "node:test";
import { Redis } from "ioredis";
import { redisKeys, type RedisKeys } from "../../lib/redis/keys";
import { abandonRun, closeAbandonedRuns } from "../../lib/runs/abandoned";
import { readTimelineBuckets, type TimelineBucket } from "../../lib/runs/buckets";
import { DEFAULT_RETENTION, readRun, recordTtlMs } from "../../lib/runs/records";
import { bucketStartOf, TIMELINE_BUCKET_MS } from "../../lib/runs/timeline-counters";
import { trimRuns } from "../../lib/runs/trim";
import type { RunRecord } from "../../lib/runs/types";
import { importRunInto, writeRun, type AttemptIdentity, type RunStore } from "../../lib/runs/writer";
import { beginAttemptResult as beginAttempt, testAttempt } from "../support/runs";
import { startTestRedis, stopTestRedis, uniquePrefix } from "../support/redis";

const server = await startTestRedis();
const client = new Redis(server.url);
after(async () => {
  client.disconnect();
  await stopTestRedis(server);
});

const storeOf = (keys: RedisKeys): RunStore & { client: Redis } => ({
  client,
  keys,
  retention: DEFAULT_RETENTION,
});

function attempt(jobId: string, n: number, place: { rebuild: string; tenant: string | null }): AttemptIdentity {
  return testAttempt(jobId, n, { ...place, rebuildName: place.rebuild });
}

/** Buckets as `lane@start` → counts and summed durations, for deepEqual. */
const flat = (buckets: TimelineBucket[]) =>
  Object.fromEntries(
    buckets.map((b) => [
      `${b.tenant ? `${b.rebuild}/${b.tenant}` : b.rebuild}@${b.start}`,
      { counts: b.counts, durationMs: b.durationMs },
    ]),
  );

/** What the counters must say about `records` (final ones), at one level: the truth from the records. */
function expected(records: RunRecord[], level: { rebuild?: string }): Record<string, unknown> {
  const out: Record<string, { counts: Record<string, number>; durationMs: Record<string, number> }> = {};
  for (const r of records) {
    if (level.rebuild && r.rebuild !== level.rebuild) continue;
    const lane = level.rebuild && r.tenant ? `${r.rebuild}/${r.tenant}` : r.rebuild;
    const key = `${lane}@${bucketStartOf(r.startedAt!)}`;
    const entry = (out[key] ??= { counts: {}, durationMs: {} });
    entry.counts[r.status] = (entry.counts[r.status] ?? 0) + 1;
    entry.durationMs[r.status] = (entry.durationMs[r.status] ?? 0) + r.durationMs!;
  }
  return out;
}

async function readBoth(keys: RedisKeys, rebuild: string) {
  const since = Date.now() - 2 * TIMELINE_BUCKET_MS;
  const until = Date.now() + TIMELINE_BUCKET_MS;
  return {
    rebuilds: flat(await readTimelineBuckets(client, keys, { since, until, bucketMs: TIMELINE_BUCKET_MS })),
    tenants: flat(await readTimelineBuckets(client, keys, { since, until, bucketMs: TIMELINE_BUCKET_MS, rebuild })),
  };
}

test("every way into a final status counts the run once, per rebuild and per tenant, with its duration", async () => {
  const keys = redisKeys(uniquePrefix());
  const store = storeOf(keys);
  const acme = { rebuild: "tiles", tenant: "acme" };
  const globex = { rebuild: "tiles", tenant: "globex" };
  const plain = { rebuild: "tiles", tenant: null };

  // running → rebuilt through a write
  const a = attempt("a", 1, acme);
  await beginAttempt(store, a, { mode: { kind: "running" } });
  await new Promise((resolve) => setTimeout(resolve, 15));
  assert.equal(await writeRun(store, a, { fields: { progress: 0.5 } }), "written"); // not final: no count
  assert.deepEqual(await readBoth(keys, "tiles"), { rebuilds: {}, tenants: {} }, "a run in flight is not counted");
  assert.equal(await writeRun(store, a, { status: "rebuilt" }), "written");
  // begins and ends at once (failed early), and an already-rebuilt skip
  await beginAttempt(store, attempt("b", 1, globex), { mode: { kind: "final", status: "failed", reason: "bad" } });
  await client.set(keys.idempotency("k"), "a-a1");
  await beginAttempt(store, attempt("c", 1, plain), { mode: { kind: "check", idempotencyKey: "k" } });
  // the next attempt closes the previous one (aborted), then fails itself
  await beginAttempt(store, attempt("d", 1, acme), { mode: { kind: "running" } });
  await beginAttempt(store, attempt("d", 2, acme), { mode: { kind: "running" } });
  assert.equal(await writeRun(store, attempt("d", 2, acme), { status: "failed" }), "written");
  // an abandon by hand, and the sweep (worker w-gone has no heartbeat)
  await beginAttempt(store, attempt("e", 1, globex), { mode: { kind: "running" } });
  assert.equal(await abandonRun(store, attempt("e", 1, globex), "by hand"), true);
  await beginAttempt(store, { ...attempt("f", 1, plain), workerId: "w-gone" }, { mode: { kind: "running" } });
  assert.deepEqual(await closeAbandonedRuns(store), ["f-a1"]);

  const ids = ["a-a1", "b-a1", "c-a1", "d-a1", "d-a2", "e-a1", "f-a1"];
  const records = (await Promise.all(ids.map((id) => readRun(client, keys, id)))).map((r) => r!);
  assert.deepEqual(
    records.map((r) => r.status),
    ["rebuilt", "failed", "skipped", "aborted", "failed", "aborted", "aborted"],
  );
  assert.ok(records[0]!.durationMs! >= 15, "a duration from the record's own start");
  const truth = { rebuilds: expected(records, {}), tenants: expected(records, { rebuild: "tiles" }) };
  assert.deepEqual(await readBoth(keys, "tiles"), truth);

  // Nothing counts twice: late writes to final records, a second abandon, a begin of an existing id.
  assert.equal(await writeRun(store, a, { status: "failed" }), "final");
  assert.equal(await writeRun(store, attempt("d", 2, acme), { status: "aborted" }), "final");
  assert.equal(await abandonRun(store, attempt("e", 1, globex), "again"), false);
  assert.deepEqual(await closeAbandonedRuns(store), []);
  assert.deepEqual(await beginAttempt(store, a, { mode: { kind: "final", status: "failed", reason: "x" } }), {
    status: "exists",
    recordStatus: "rebuilt",
    cancelRequest: null,
  });
  assert.deepEqual(await readBoth(keys, "tiles"), truth);

  // Each bucket hash expires the record TTL after its hour ends.
  const hour = bucketStartOf(records[0]!.startedAt!);
  for (const key of [keys.timelineBucket(hour), keys.timelineBucket(hour, "tiles")]) {
    assert.equal(
      Number(await client.call("PEXPIRETIME", key)),
      hour + TIMELINE_BUCKET_MS + recordTtlMs(DEFAULT_RETENTION),
    );
  }
});

test("trimmed records stay counted (history); a write to a trimmed record counts nothing", async () => {
  const keys = redisKeys(uniquePrefix());
  const store = storeOf(keys);
  const place = { rebuild: "tiles", tenant: "acme" };
  const records: RunRecord[] = [];
  for (const job of ["t1", "t2", "t3"]) {
    await beginAttempt(store, attempt(job, 1, place), { mode: { kind: "running" } });
    assert.equal(await writeRun(store, attempt(job, 1, place), { status: "rebuilt" }), "written");
    records.push((await readRun(client, keys, `${job}-a1`))!);
  }
  // A run still in flight, to be finished after its record is trimmed away below. It starts in a
  // later millisecond than t3 (the index score): on a tie the member name orders, "late-a1"
  // before "t3-a1", and the count trim would keep t3 as the newest (a flake seen in CI).
  await new Promise((resolve) => setTimeout(resolve, 5));
  await beginAttempt(store, attempt("late", 1, place), { mode: { kind: "running" } });
  const truth = { rebuilds: expected(records, {}), tenants: expected(records, { rebuild: "tiles" }) };
  assert.deepEqual(await readBoth(keys, "tiles"), truth);

  const removed = await trimRuns(client, keys, {
    rebuild: "tiles",
    tenant: "acme",
    retention: { maxPerRebuild: 1, maxAgeMs: DEFAULT_RETENTION.maxAgeMs },
  });
  assert.equal(removed, 3, "the three finished ones go; the one in flight stays");
  assert.equal(await readRun(client, keys, "t1-a1"), null);
  assert.deepEqual(await readBoth(keys, "tiles"), truth, "trimming does not uncount");

  await client.del(keys.run("late-a1")); // gone (expired) while its attempt still ran
  assert.equal(await writeRun(store, attempt("late", 1, place), { status: "rebuilt" }), "missing");
  assert.deepEqual(await readBoth(keys, "tiles"), truth, "a record that is gone is not counted");
});

test("seeded history counts in the hour of each run's start; the reader merges hours into wider buckets", async () => {
  const keys = redisKeys(uniquePrefix());
  const hour = bucketStartOf(Date.now()) - 5 * TIMELINE_BUCKET_MS;
  const seed = (
    id: string,
    rebuild: string,
    tenant: string | null,
    startedAt: number,
    status: "rebuilt" | "failed",
  ) => ({
    id,
    jobId: id,
    attempt: 1,
    rebuild,
    tenant,
    version: null,
    status,
    reason: null,
    trigger: "api" as const,
    workerId: null,
    host: null,
    createdAt: startedAt - 10,
    startedAt,
    finishedAt: startedAt + 1_000,
    durationMs: 1_000,
    fence: null,
    buildHash: null,
    idempotencyKey: null,
    progress: 1,
    steps: [],
  });
  const records = [
    seed("s1-a1", "tiles", "acme", hour + 10, "rebuilt"),
    seed("s2-a1", "tiles", "acme", hour + TIMELINE_BUCKET_MS - 1, "failed"),
    seed("s3-a1", "tiles", "globex", hour + TIMELINE_BUCKET_MS, "rebuilt"),
    seed("s4-a1", "reports", null, hour + 2 * TIMELINE_BUCKET_MS + 5, "rebuilt"),
  ];
  const tx = client.multi();
  for (const r of records) importRunInto(tx, keys, r, DEFAULT_RETENTION);
  await tx.exec();
  const since = hour;
  const until = hour + 3 * TIMELINE_BUCKET_MS - 1;
  assert.deepEqual(
    flat(await readTimelineBuckets(client, keys, { since, until, bucketMs: TIMELINE_BUCKET_MS })),
    expected(records, {}),
  );
  assert.deepEqual(
    flat(await readTimelineBuckets(client, keys, { since, until, bucketMs: TIMELINE_BUCKET_MS, rebuild: "tiles" })),
    expected(records, { rebuild: "tiles" }),
  );
  // Three hours merged (buckets aligned to the epoch): tiles' three runs fall in one or two of them.
  const wide = await readTimelineBuckets(client, keys, { since, until, bucketMs: 3 * TIMELINE_BUCKET_MS });
  const tiles = wide.filter((b) => b.rebuild === "tiles");
  assert.deepEqual(
    tiles.reduce((sum, b) => sum + (b.counts.rebuilt ?? 0) + (b.counts.failed ?? 0), 0),
    3,
  );
  for (const b of wide) assert.equal(b.start % (3 * TIMELINE_BUCKET_MS), 0);
  assert.deepEqual(
    tiles.reduce((sum, b) => sum + (b.durationMs.rebuilt ?? 0), 0),
    2_000,
  );
});
