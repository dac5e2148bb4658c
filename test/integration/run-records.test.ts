/**
 * The run-record writer against a real Redis: every branch of its scripts — begin (fresh,
 * already rebuilt, ending at once, existing id, closing the previous attempt, a stray one),
 * writes (fields, moves, a final record frozen, a trimmed record not recreated, a refused move),
 * the abandoned-run sweep (live and dead workers), trimming (in-flight runs kept) — with the
 * status indexes checked after each.
 */
import assert from "node:assert/strict";
import { after, test } from "node:test";
import { Redis } from "ioredis";
import { redisKeys, type RedisKeys } from "../../lib/redis/keys";
import { abandonRun, closeAbandonedRuns, SWEEP_BATCH } from "../../lib/runs/abandoned";
import { serverNow } from "../../lib/redis/time";
import { HEARTBEAT_TTL_MS } from "../../lib/workers/heartbeat";
import { listRunSummaries, listRuns } from "../../lib/runs/list";
import {
  DEFAULT_RETENTION,
  logDroppedLine,
  publishedProof,
  readRun,
  readRunLog,
  RUN_LOG_LINES,
  toFields,
} from "../../lib/runs/records";
import { RUN_WRITE } from "../../lib/runs/scripts";
import { ABORTED_KEPT_MS, trimAllRuns, trimRuns } from "../../lib/runs/trim";
import { RUN_STATUSES } from "../../lib/runs/types";
import {
  beginAttempt as beginOwnedAttempt,
  flushUnansweredFinals,
  recordVersion,
  resendFinalWrite,
  RunRecorder,
  writeRun,
  type AttemptIdentity,
  type BeginResult,
  type RunStore,
} from "../../lib/runs/writer";
import { replyLosingClient } from "../support/reply-losing";
import { beginAttemptResult as beginAttempt, TEST_LANE, testAttempt } from "../support/runs";
import { startTestRedis, stopTestRedis, uniquePrefix } from "../support/redis";

const server = await startTestRedis();
const client = new Redis(server.url);
after(async () => {
  client.disconnect();
  await stopTestRedis(server);
});

function storeOf(keys: RedisKeys, retention = DEFAULT_RETENTION): RunStore & { client: Redis } {
  return { client, keys, retention };
}

function attempt(jobId: string, n: number, workerId = "w1"): AttemptIdentity {
  return testAttempt(jobId, n, { workerId });
}

/** Every status filter (alone, per rebuild, per rebuild and tenant) that lists `id`, as `status:filter`. */
async function statusesListing(keys: RedisKeys, id: string): Promise<string[]> {
  const found: string[] = [];
  for (const status of RUN_STATUSES) {
    for (const filter of [{ status }, { rebuild: "tiles", status }, { rebuild: "tiles", tenant: "acme", status }]) {
      const page = await listRuns(client, keys, filter, 50);
      if (page.runs.some((run) => run.id === id)) found.push(`${status}:${Object.keys(filter).length}`);
    }
  }
  return found;
}
const onlyIn = (status: string) => [`${status}:1`, `${status}:2`, `${status}:3`];

test("an attempt begins running, moves through fields to a final status, and a final record never changes", async () => {
  const keys = redisKeys(uniquePrefix());
  const store = storeOf(keys);
  const a1 = attempt("job", 1);
  assert.deepEqual(await beginAttempt(store, a1, { mode: { kind: "running" }, fields: { version: "v1" } }), {
    status: "began",
    cancelRequest: null,
  });
  const begun = await readRun(client, keys, a1.runId);
  assert.equal(begun?.status, "running");
  assert.equal(begun?.version, "v1");
  assert.ok(begun?.startedAt, "started on the Redis clock");
  assert.deepEqual(await statusesListing(keys, a1.runId), onlyIn("running"));

  assert.equal(await writeRun(store, a1, { fields: { progress: 0.5 } }), "written");
  assert.equal(await writeRun(store, a1, { status: "rebuilt", fields: { buildHash: "abc" } }), "written");
  const done = await readRun(client, keys, a1.runId);
  assert.equal(done?.status, "rebuilt");
  assert.equal(done?.durationMs, done!.finishedAt! - done!.startedAt!);
  assert.deepEqual(await statusesListing(keys, a1.runId), onlyIn("rebuilt"));

  // A late writer (a paused attempt waking up) cannot change it: not its status, not its fields.
  assert.equal(await writeRun(store, a1, { status: "aborted", fields: { reason: "late" } }), "final");
  assert.equal(await writeRun(store, a1, { fields: { progress: 0.1 } }), "final");
  const after = await readRun(client, keys, a1.runId);
  assert.equal(after?.status, "rebuilt");
  assert.equal(after?.reason, null);
  assert.equal(after?.progress, 0.5);
  assert.deepEqual(await statusesListing(keys, a1.runId), onlyIn("rebuilt"));
  assert.equal(await client.exists(keys.runOpenAttempt("job")), 0, "no attempt in flight");
});

test("a job created by a host whose clock is ahead of Redis's: its record is not created after it started", async () => {
  const keys = redisKeys(uniquePrefix());
  const store = storeOf(keys);
  const ahead = testAttempt("ahead", 1, { createdAt: (await serverNow(client)) + 60_000 });
  await beginAttempt(store, ahead, { mode: { kind: "running" } });
  const record = await readRun(client, keys, ahead.runId);
  assert.ok(record?.startedAt, "started on the Redis clock");
  assert.equal(record.createdAt, record.startedAt, "created no later than it started");
  // A creation time behind the start (the usual case) is kept as given.
  const behind = testAttempt("behind", 1, { createdAt: 1_000 });
  await beginAttempt(store, behind, { mode: { kind: "running" } });
  assert.equal((await readRun(client, keys, behind.runId))?.createdAt, 1_000);
});

test("a version counts as rebuilt while it is its lane's newest publish: a higher fence of another version unmarks it, a lower one marks nothing", async () => {
  const keys = redisKeys(uniquePrefix());
  const store = storeOf(keys);
  const finishAt = async (jobId: string, key: string, fence: number) => {
    const run = attempt(jobId, 1);
    await beginAttempt(store, run, { mode: { kind: "running" } });
    const written = await writeRun(store, run, {
      status: "rebuilt",
      fields: { fence },
      idempotency: { change: "set", key, ttlMs: 60_000, fence },
    });
    assert.equal(written, "written");
    return run.runId;
  };
  const a = await finishAt("pub-a", "h-a", 5);
  assert.equal(await client.get(keys.idempotency("h-a")), a);
  // An older fence of another version, written after (deferred behind a, it published under it):
  // its build is not what the lane serves, so a request for it must build.
  await finishAt("pub-b-old", "h-b", 3);
  assert.equal(await client.get(keys.idempotency("h-b")), null, "not the newest publish: not marked");
  assert.equal(await client.get(keys.idempotency("h-a")), a, "the newest stays marked");
  // A newer publish of another version: the one before no longer counts as rebuilt.
  const b = await finishAt("pub-b", "h-b", 7);
  assert.equal(await client.get(keys.idempotency("h-b")), b);
  assert.equal(await client.get(keys.idempotency("h-a")), null, "a's build is no longer served: a's request builds");
  // The same version again (a forced rebuild) keeps its mark.
  const again = await finishAt("pub-b-again", "h-b", 8);
  assert.equal(await client.get(keys.idempotency("h-b")), again);
});

test("a build of another version begins (known at the begin, or once read): the version its lane marked rebuilt is unmarked, so its request builds after it", async () => {
  const keys = redisKeys(uniquePrefix());
  const store = storeOf(keys);
  // A lane key of another type (an earlier build of the code wrote a STRING) is dropped, not an error.
  await client.set(keys.rebuiltNow(TEST_LANE), "3 old-format");
  const published = attempt("lane-a", 1);
  assert.equal(
    (await beginAttempt(store, published, { mode: { kind: "check", idempotencyKey: "h-a" }, builds: "h-a" })).status,
    "began",
  );
  assert.equal(await client.type(keys.rebuiltNow(TEST_LANE)), "hash");
  assert.ok((await client.pttl(keys.rebuiltNow(TEST_LANE))) > 0, "the lane expires");
  await writeRun(store, published, {
    status: "rebuilt",
    fields: { fence: 5 },
    idempotency: { change: "set", key: "h-a", ttlMs: 60_000, fence: 5 },
  });
  // A's repeat while A is what the lane serves: skipped; a forced build of A unmarks nothing.
  assert.equal(
    (await beginAttempt(store, attempt("lane-a-repeat", 1), { mode: { kind: "check", idempotencyKey: "h-a" } })).status,
    "already-rebuilt",
  );
  await beginAttempt(store, attempt("lane-a-forced", 1), { mode: { kind: "running" }, builds: "h-a" });
  assert.equal(await client.get(keys.idempotency("h-a")), published.runId);
  // B begins building: A no longer counts as rebuilt (the output is about to serve B).
  const b = await beginAttempt(store, attempt("lane-b", 1), {
    mode: { kind: "check", idempotencyKey: "h-b" },
    builds: "h-b",
  });
  assert.equal(b.status, "began");
  assert.equal(await client.get(keys.idempotency("h-a")), null);
  assert.equal(
    (await beginAttempt(store, attempt("lane-a-again", 1), { mode: { kind: "check", idempotencyKey: "h-a" } })).status,
    "began",
    "A's request during B's build is not skipped",
  );
  // The same when the version is known only after the inputs are read (RUN_VERSION).
  await client.set(keys.idempotency("h-c"), "run-c");
  await client.hset(keys.rebuiltNow(TEST_LANE), { fence: 9, key: keys.idempotency("h-c") });
  const early = attempt("lane-d", 1);
  const begun = await beginOwnedAttempt(store, early, { mode: { kind: "running" } });
  assert.equal(await client.get(keys.idempotency("h-c")), "run-c", "no version yet: nothing unmarked");
  const versioned = await recordVersion(store, early, {
    fields: { version: "vd" },
    idempotencyKey: "h-d",
    builds: "h-d",
    owner: begun.beginId,
  });
  assert.equal(versioned.status, "began");
  assert.equal(await client.get(keys.idempotency("h-c")), null);
});

/** An attempt of job `jobId` begun building the version of idempotency key `key` (its lane's newest build). */
async function beginBuilding(store: ReturnType<typeof storeOf>, jobId: string, key: string): Promise<AttemptIdentity> {
  const run = attempt(jobId, 1);
  assert.equal(
    (await beginAttempt(store, run, { mode: { kind: "check", idempotencyKey: key }, builds: key })).status,
    "began",
  );
  return run;
}

/** `run`'s final write: rebuilt, publishing `key`'s version with `fence`. */
function publishRebuilt(store: ReturnType<typeof storeOf>, run: AttemptIdentity, key: string, fence: number) {
  return writeRun(store, run, {
    status: "rebuilt",
    fields: { fence },
    idempotency: { change: "set", key, ttlMs: 60_000, fence },
  });
}

test("a late mark of a version whose publish came before another version's build began marks nothing; the later publish marks its own", async () => {
  const keys = redisKeys(uniquePrefix());
  const store = storeOf(keys);
  const begin = (jobId: string, key: string) => beginBuilding(store, jobId, key);
  const publish = (run: AttemptIdentity, key: string, fence: number) => publishRebuilt(store, run, key, fence);
  const z = await begin("late-z", "h-z");
  await publish(z, "h-z", 3);
  // X builds A and publishes at fence 5; its final write is lost (written again later).
  const x = await begin("late-x", "h-a");
  // Y begins B meanwhile: the output will serve B.
  const y = await begin("late-y", "h-b");
  assert.equal(await client.get(keys.idempotency("h-z")), null, "Z unmarked when a build began");
  // X's final write, sent again after Y began: A is not marked (B publishes after it).
  assert.equal(await publish(x, "h-a", 5), "written");
  assert.equal(await client.get(keys.idempotency("h-a")), null, "A not marked: a request for A builds");
  assert.equal(
    (
      await beginAttempt(store, attempt("late-a-again", 1), {
        mode: { kind: "check", idempotencyKey: "h-a" },
        builds: "h-a",
      })
    ).status,
    "began",
  );
  // Y publishes B at fence 6 (after the request for A began, which makes A the newest build).
  await publish(y, "h-b", 6);
  assert.equal(await client.get(keys.idempotency("h-b")), null, "A's build began after B's: B not marked");
  assert.equal(await client.hget(keys.rebuiltNow(TEST_LANE), "fence"), "6");
  // A lower fence after it (an older publish's late write) changes nothing.
  await publish(x, "h-a", 5);
  assert.equal(await client.get(keys.idempotency("h-a")), null);
});

test("a run closed rebuilt from the proof of its publish records its fence in its lane and marks nothing: a request of its version begun since still builds (review helper-118)", async () => {
  const keys = redisKeys(uniquePrefix());
  const store = storeOf(keys);
  const begin = async (jobId: string, key: string) => {
    const run = await beginBuilding(store, jobId, key);
    await client.hset(keys.run(run.runId), "idempotencyKey", key);
    return run;
  };
  // A1 builds A and publishes with fence 5 (the claims Redis names it); its worker is killed
  // before its final write.
  const a1 = await begin("proof-a1", "h-a");
  const build = "ab".repeat(16);
  assert.equal(await writeRun(store, a1, { fields: { publishing: `5 ${build}` } }), "written");
  // B begins, then A is asked for again (the lane's newest build); B publishes with fence 6, its
  // final write not landed yet. A1 is closed from a proof read before B's publish.
  await begin("proof-b", "h-b");
  await begin("proof-a3", "h-a");
  const proof = {
    kind: "proven" as const,
    proof: publishedProof({ fence: 5, buildHash: build, publishedAt: await serverNow(client) }),
    idempotencyTtlMs: 60_000,
    lane: TEST_LANE,
  };
  assert.equal(await abandonRun(store, a1, "its worker stopped", proof), true);
  assert.equal((await readRun(client, keys, a1.runId))?.status, "rebuilt");
  assert.equal(await client.hget(keys.rebuiltNow(TEST_LANE), "fence"), "5", "its fence is the lane's");
  assert.equal(await client.get(keys.idempotency("h-a")), null, "A is not marked: the output is about to serve B");
  assert.equal(
    (
      await beginAttempt(store, attempt("proof-a4", 1), {
        mode: { kind: "check", idempotencyKey: "h-a" },
        builds: "h-a",
      })
    ).status,
    "began",
    "a request for A builds",
  );
  // An older publish's late final write after it (fence 4) marks nothing.
  await publishRebuilt(store, await begin("proof-old", "h-z"), "h-z", 4);
  assert.equal(await client.get(keys.idempotency("h-z")), null, "below the lane's fence: not marked");
});

test("a write to a record that is gone recreates nothing; a move outside the transitions is refused", async () => {
  const keys = redisKeys(uniquePrefix());
  const store = storeOf(keys);
  const a1 = attempt("gone", 1);
  await beginAttempt(store, a1, { mode: { kind: "running" } });
  await client.del(keys.run(a1.runId)); // trimmed or expired
  assert.equal(await writeRun(store, a1, { fields: { progress: 1 }, logLines: ["x"] }), "missing");
  assert.equal(await client.exists(keys.run(a1.runId)), 0);
  assert.equal(await client.exists(keys.runLog(a1.runId)), 0);

  const b1 = attempt("back", 1);
  await beginAttempt(store, b1, { mode: { kind: "running" } });
  assert.equal(await writeRun(store, b1, { status: "queued" as never }), "refused");
  assert.equal((await readRun(client, keys, b1.runId))?.status, "running");
});

test("begin: already rebuilt is one write of a skipped record; a final begin; an existing id is left alone", async () => {
  const keys = redisKeys(uniquePrefix());
  const store = storeOf(keys);
  await client.set(keys.idempotency("h1"), "job0-a1");
  await client.set(keys.pendingTrigger("tiles", "acme", "v1", false), "skip");
  const skip = attempt("skip", 1);
  assert.deepEqual(
    await beginAttempt(store, skip, {
      mode: { kind: "check", idempotencyKey: "h1" },
      pendingTrigger: keys.pendingTrigger("tiles", "acme", "v1", false),
    }),
    { status: "already-rebuilt", rebuiltBy: "job0-a1", cancelRequest: null },
  );
  const skipped = await readRun(client, keys, skip.runId);
  assert.equal(skipped?.status, "skipped");
  assert.equal(skipped?.reason, "already-rebuilt: already rebuilt by run job0-a1");
  assert.equal(skipped?.durationMs, 0);
  assert.deepEqual(await statusesListing(keys, skip.runId), onlyIn("skipped"));
  assert.equal(await client.get(keys.pendingTrigger("tiles", "acme", "v1", false)), null, "marker dropped");

  const notYet = attempt("fresh", 1);
  assert.deepEqual(await beginAttempt(store, notYet, { mode: { kind: "check", idempotencyKey: "h2" } }), {
    status: "began",
    cancelRequest: null,
  });
  assert.equal((await readRun(client, keys, notYet.runId))?.status, "running");

  const early = attempt("early", 1);
  assert.deepEqual(
    await beginAttempt(store, early, { mode: { kind: "final", status: "failed", reason: "inputs unreadable" } }),
    { status: "ended", cancelRequest: null },
  );
  assert.equal((await readRun(client, keys, early.runId))?.reason, "inputs unreadable");
  assert.deepEqual(await statusesListing(keys, early.runId), onlyIn("failed"));

  assert.deepEqual(await beginAttempt(store, early, { mode: { kind: "running" } }), {
    status: "exists",
    recordStatus: "failed",
    cancelRequest: null,
  });
  assert.equal((await readRun(client, keys, early.runId))?.status, "failed");
});

test("the next attempt closes the previous one if still in flight, and a stray one too; never a final one", async () => {
  const keys = redisKeys(uniquePrefix());
  const store = storeOf(keys);
  await beginAttempt(store, attempt("j", 1), { mode: { kind: "running" } });
  await beginAttempt(store, attempt("j", 2), { mode: { kind: "final", status: "deferred", reason: "waits" } });
  const first = await readRun(client, keys, "j-a1");
  assert.equal(first?.status, "aborted");
  assert.match(first?.reason ?? "", /redelivered as attempt 2/);
  assert.deepEqual(await statusesListing(keys, "j-a1"), onlyIn("aborted"));
  assert.equal((await readRun(client, keys, "j-a2"))?.status, "deferred", "its own final record stays");

  // Attempt 4 began; attempt 5 died before its first write; attempt 6 closes 4 (the stray).
  await beginAttempt(store, attempt("j", 4), { mode: { kind: "running" } });
  await beginAttempt(store, attempt("j", 6), { mode: { kind: "running" } });
  assert.equal((await readRun(client, keys, "j-a4"))?.status, "aborted");
  assert.equal(await readRun(client, keys, "j-a5"), null, "an attempt without a record is not invented");
  assert.equal(await client.get(keys.runOpenAttempt("j")), "j-a6");

  // A finished attempt is never reopened or moved by the next one.
  await writeRun(store, attempt("j", 6), { status: "rebuilt" });
  await beginAttempt(store, attempt("j", 7), { mode: { kind: "running" } });
  assert.equal((await readRun(client, keys, "j-a6"))?.status, "rebuilt");
});

test("attempts list in the order they started, whatever their number (a10 after a9)", async () => {
  const keys = redisKeys(uniquePrefix());
  const store = storeOf(keys);
  for (let n = 1; n <= 11; n++) {
    await beginAttempt(store, attempt("order", n), { mode: { kind: "final", status: "deferred", reason: "w" } });
    await new Promise((r) => setTimeout(r, 2)); // distinct ms on the Redis clock
  }
  const page = await listRuns(client, keys, { rebuild: "tiles", tenant: "acme" }, 3);
  assert.deepEqual(
    page.runs.map((r) => r.id),
    ["order-a11", "order-a10", "order-a9"],
  );
  const summaries = await listRunSummaries(client, keys, { rebuild: "tiles" }, 1);
  assert.equal(summaries[0]?.id, "order-a11");
});

test("the recorder coalesces updates and log lines and sends the last of them with the final record", async () => {
  const keys = redisKeys(uniquePrefix());
  const store = storeOf(keys, { maxPerRebuild: 10, maxAgeMs: 3_600_000 });
  const a1 = attempt("rec", 1);
  await beginAttempt(store, a1, { mode: { kind: "running" } });
  const recorder = new RunRecorder(store, a1);
  for (let i = 0; i <= 10; i++) recorder.update({ progress: i / 10 });
  recorder.log("one");
  recorder.log("two");
  assert.equal(await recorder.finish("failed", { reason: "boom" }, { change: "del", key: "h", ttlMs: 0 }), "written");
  const done = await readRun(client, keys, a1.runId);
  assert.equal(done?.status, "failed");
  assert.equal(done?.progress, 1);
  assert.deepEqual(
    (await readRunLog(client, keys, a1.runId)).map((line) => line.split(" ")[1]),
    ["one", "two"],
  );
  // Retention applies to every write, not only the final one.
  const ttl = await client.pttl(keys.run(a1.runId));
  assert.ok(ttl > 0 && ttl <= 3_600_000 + 86_400_000, `record TTL from the configured retention (got ${ttl})`);
});

test("a run log keeps its newest lines after one line that counts the dropped ones, in Redis and in the recorder's buffer", async () => {
  const keys = redisKeys(uniquePrefix());
  const store = storeOf(keys);
  const a1 = attempt("chatty", 1);
  await beginAttempt(store, a1, { mode: { kind: "running" } });
  const lines = (from: number, count: number) => Array.from({ length: count }, (_, i) => `line ${from + i}`);
  // Three writes: 300 lines (all kept), 300 more (101 dropped), 1 more (1 more dropped).
  await writeRun(store, a1, { logLines: lines(0, 300) });
  assert.equal((await readRunLog(client, keys, a1.runId)).length, 300);
  await writeRun(store, a1, { logLines: lines(300, 300) });
  let log = await readRunLog(client, keys, a1.runId);
  assert.equal(log.length, RUN_LOG_LINES);
  assert.equal(log[0], logDroppedLine(101));
  assert.deepEqual([log[1], log.at(-1)], ["line 101", "line 599"]);
  await writeRun(store, a1, { logLines: ["line 600"] });
  log = await readRunLog(client, keys, a1.runId);
  assert.equal(log.length, RUN_LOG_LINES);
  assert.deepEqual([log[0], log[1], log.at(-1)], [logDroppedLine(102), "line 102", "line 600"]);

  // A recorder that buffered more than a log keeps between two writes sends its own count, and
  // the log adds it to its own.
  const recorder = new RunRecorder(store, a1);
  for (let i = 0; i < 1_200; i++) recorder.log(`buffered ${i}`);
  assert.equal(await recorder.finish("failed", { reason: "boom" }), "written");
  log = await readRunLog(client, keys, a1.runId);
  assert.equal(log.length, RUN_LOG_LINES);
  // Dropped: the 102 counted before, the 499 lines that were kept, and 701 of the 1 200 buffered.
  assert.equal(log[0], logDroppedLine(102 + 499 + 701));
  assert.match(log[1]!, / buffered 701$/);
  assert.match(log.at(-1)!, / buffered 1199$/);
});

test("a final record whose write failed keeps its fields and log lines for the next try", async () => {
  const keys = redisKeys(uniquePrefix());
  const a1 = attempt("retry-final", 1);
  await beginAttempt(storeOf(keys), a1, { mode: { kind: "running" } });
  const gone = new Redis(server.url, { lazyConnect: true, enableOfflineQueue: false });
  gone.disconnect();
  const store: RunStore = { client: gone, keys, retention: DEFAULT_RETENTION };
  const recorder = new RunRecorder(store, a1);
  recorder.update({ progress: 0.5 });
  recorder.log("kept");
  await assert.rejects(recorder.finish("rebuilt", { buildHash: "b1" }, { change: "set", key: "k", ttlMs: 60_000 }));
  store.client = client; // the main Redis answers again (the worker writes the record after the release)
  assert.equal(
    await recorder.finish("rebuilt", { buildHash: "b1" }, { change: "set", key: "k", ttlMs: 60_000 }),
    "written",
  );
  const done = await readRun(client, keys, a1.runId);
  assert.deepEqual([done?.status, done?.progress, done?.buildHash], ["rebuilt", 0.5, "b1"]);
  assert.deepEqual(
    (await readRunLog(client, keys, a1.runId)).map((line) => line.split(" ")[1]),
    ["kept"],
  );
  assert.equal(await client.get(keys.idempotency("k")), a1.runId);
});

test("a final write applied twice (a retried or resent call) writes, counts and logs once; another writer's is not taken for it", async () => {
  const keys = redisKeys(uniquePrefix());
  const store = storeOf(keys);
  const a1 = attempt("twice", 1);
  await beginAttempt(store, a1, { mode: { kind: "running" } });
  const write = { status: "rebuilt" as const, fields: { buildHash: "b1" }, logLines: ["published b1"], writeId: "w1" };
  assert.equal(await writeRun(store, a1, write), "written");
  assert.equal(await writeRun(store, a1, write), "written", "the same write, applied already");
  assert.deepEqual(await readRunLog(client, keys, a1.runId), ["published b1"]);
  assert.equal(await client.hget(keys.metricsCounters, "runs|tiles|acme|rebuilt"), "1");
  // Another writer's final write, even with the same status, finds the record final; its lines
  // (news from a late writer) are kept.
  assert.equal(await writeRun(store, a1, { status: "rebuilt", logLines: ["other"], writeId: "w2" }), "final");
  assert.equal(await writeRun(store, a1, { status: "rebuilt", logLines: ["no id"] }), "final");
  assert.equal(await writeRun(store, a1, { status: "aborted", logLines: ["late line"] }), "final");
  assert.equal((await readRun(client, keys, a1.runId))?.status, "rebuilt");
  assert.deepEqual(await readRunLog(client, keys, a1.runId), ["published b1", "other", "no id", "late line"]);
  assert.equal(await client.hget(keys.metricsCounters, "runs|tiles|acme|rebuilt"), "1");

  // The sweep closed a paused worker's attempt as aborted; the worker wakes and ends it aborted
  // too (a hand-back): its write is not a repeat, its lines are kept and it is told "final".
  const b1 = attempt("swept", 1, "gone");
  await beginAttempt(store, b1, { mode: { kind: "running" } });
  assert.equal(await abandonRun(store, b1, "its worker stopped answering"), true);
  const recorder = new RunRecorder(store, b1);
  recorder.log("handed back on waking");
  assert.equal(await recorder.finish("aborted", { reason: "shutdown" }), "final");
  assert.equal((await readRun(client, keys, b1.runId))?.reason, "its worker stopped answering");
  assert.equal((await readRunLog(client, keys, b1.runId)).length, 1);
});

test("the same attempt begun again (a second pickup: the queue lost a pickup) takes its record over while in flight: the first pickup's writes are refused from then on (but its idempotency change), the job's own writes (a cancel) still land, a final record is left alone", async () => {
  const keys = redisKeys(uniquePrefix());
  const store = storeOf(keys);
  const a1 = attempt("owned", 1);
  const first = await beginOwnedAttempt(store, a1, { mode: { kind: "running" } });
  assert.equal(first.status, "began");
  const mine = { owner: first.beginId };
  assert.equal(
    await writeRun(store, a1, {
      fields: { progress: 0.5, fence: 1, steps: [{ name: "s", status: "running", startedAt: 1, finishedAt: null }] },
      logLines: ["first's"],
      ...mine,
    }),
    "written",
  );
  let record = await readRun(client, keys, a1.runId);
  const startedAt = record?.startedAt;
  const score = await client.zscore(keys.runIndex(), a1.runId);

  // The first pickup's worker still beats: its record is not taken (the second is told what it says).
  await client.set(keys.workerHeartbeat("w1"), "1", "PX", 60_000);
  const refused = await beginOwnedAttempt(store, { ...a1, workerId: "w2" }, { mode: { kind: "running" } });
  assert.equal(refused.status, "exists");
  assert.equal(refused.status === "exists" && refused.recordStatus, "running");
  const finalRefused = await beginOwnedAttempt(
    store,
    { ...a1, workerId: "w2" },
    { mode: { kind: "final", status: "aborted", reason: "stale pickup stopped" } },
  );
  assert.equal(finalRefused.status, "exists", "nor ended by a final begin");
  record = await readRun(client, keys, a1.runId);
  assert.equal(record?.workerId, "w1");
  assert.equal(record?.fence, 1, "untouched");
  assert.equal(await writeRun(store, a1, { fields: { progress: 0.6 }, ...mine }), "written", "still the first's");

  // Its worker stopped beating (died, or paused past its heartbeat): taken over.
  await client.del(keys.workerHeartbeat("w1"));
  const second = await beginOwnedAttempt(store, { ...a1, workerId: "w2" }, { mode: { kind: "running" } });
  assert.equal(second.status, "began", "taken over");
  assert.notEqual(second.beginId, first.beginId);
  record = await readRun(client, keys, a1.runId);
  assert.equal(record?.status, "running");
  assert.equal(record?.workerId, "w2");
  assert.equal(record?.progress, 0);
  assert.equal(record?.fence ?? null, null, "the first's fence is dropped");
  assert.deepEqual(record?.steps, [], "the first's steps are dropped");
  assert.equal(record?.startedAt, startedAt, "the attempt's start is kept");
  assert.equal(await client.zscore(keys.runIndex(), a1.runId), score, "and its place in the listings");
  assert.deepEqual(await statusesListing(keys, a1.runId), onlyIn("running"));

  // The first pickup's writes: refused, nothing of them in the record or its log …
  assert.equal(
    await writeRun(store, a1, { fields: { progress: 0.9 }, logLines: ["first's late"], ...mine }),
    "not-owner",
  );
  assert.equal(
    await writeRun(store, a1, {
      status: "rebuilt",
      fields: { buildHash: "b1", fence: 1 },
      idempotency: { change: "set", key: "h-owned", ttlMs: 60_000 },
      ...mine,
    }),
    "not-owner",
  );
  const recorder = new RunRecorder(store, a1);
  recorder.ownedBy(first.beginId);
  recorder.log("first's final");
  assert.equal(await recorder.finish("deferred", { reason: "claim lost" }), "not-owner");
  const versioned = await recordVersion(store, a1, { fields: { version: "v1" }, idempotencyKey: null, ...mine });
  assert.equal(versioned.status, "foreign");
  record = await readRun(client, keys, a1.runId);
  assert.equal(record?.status, "running");
  assert.equal(record?.progress, 0);
  assert.equal(record?.buildHash ?? null, null);
  assert.equal(record?.version ?? null, null);
  const log = await readRunLog(client, keys, a1.runId);
  assert.equal(log.length, 2, log.join(" | "));
  assert.equal(log[0], "first's");
  assert.match(
    log[1]!,
    /record taken over by worker w2 \(the same attempt picked up again\) from worker w1 \(its worker stopped beating\)$/,
  );
  // … but a build it published is marked rebuilt (the idempotency key is about the output).
  assert.equal(await client.get(keys.idempotency("h-owned")), a1.runId);

  // The second pickup's writes land.
  const theirs = { owner: second.beginId };
  assert.equal(
    (await recordVersion(store, a1, { fields: { version: "v2" }, idempotencyKey: null, ...theirs })).status,
    "began",
  );
  assert.equal(await writeRun(store, a1, { fields: { progress: 0.7 }, ...theirs }), "written");
  // A write on behalf of the job (an operator's cancel) names no owner: it ends the record.
  assert.equal(await writeRun(store, a1, { status: "cancelled", fields: { reason: "cancelled by op" } }), "written");
  record = await readRun(client, keys, a1.runId);
  assert.equal(record?.status, "cancelled");
  assert.equal(record?.version, "v2");
  assert.equal(record?.progress, 0.7);
  assert.deepEqual(await statusesListing(keys, a1.runId), onlyIn("cancelled"));

  // A final record is not taken over: a third pickup leaves it as it is.
  const third = await beginOwnedAttempt(store, { ...a1, workerId: "w3" }, { mode: { kind: "running" } });
  assert.equal(third.status, "exists");
  assert.equal((await readRun(client, keys, a1.runId))?.workerId, "w2");

  // Taken over in a final mode (the second pickup ended where it began): counted once, from running.
  const b1 = attempt("owned-final", 1);
  await beginOwnedAttempt(store, b1, { mode: { kind: "running" } });
  const ended = await beginOwnedAttempt(
    store,
    { ...b1, workerId: "w2" },
    { mode: { kind: "final", status: "failed", reason: "inputs unreadable" } },
  );
  assert.equal(ended.status, "ended");
  assert.equal((await readRun(client, keys, b1.runId))?.status, "failed");
  assert.deepEqual(await statusesListing(keys, b1.runId), onlyIn("failed"));
});

test("a pickup whose record was taken over does not take it back: its begin or its version write sent again (the reply lost to a reconnect) is refused, and nothing of its calls stays on the record", async () => {
  const keys = redisKeys(uniquePrefix());
  const store = storeOf(keys);
  const a1 = attempt("resent", 1);
  // The first pickup's begin lands but its reply is lost; meanwhile the second pickup takes the
  // record over; then ioredis resends the first's begin on a new connection.
  const seen: { second?: BeginResult; takeover?: BeginResult } = {};
  const lossy = await replyLosingClient(server.port, a1.runId, async () => {
    seen.second = await beginOwnedAttempt(store, { ...a1, workerId: "w2" }, { mode: { kind: "running" } });
  });
  try {
    const first = await beginOwnedAttempt({ ...store, client: lossy.main }, a1, { mode: { kind: "running" } });
    assert.ok(lossy.cut(), "the first begin's reply was dropped");
    assert.equal(seen.second?.status, "began", "the second pickup took the record over");
    assert.equal(first.status, "exists", "the resend of the displaced begin does not take the record back");
  } finally {
    await lossy.close();
  }
  const record = await readRun(client, keys, a1.runId);
  assert.equal(record?.workerId, "w2");
  assert.equal(record?.status, "running");

  // The version write: the first pickup's lands, its reply is lost, the second takes the record
  // over, the first's is resent: refused, and the second's record holds no version of the first's.
  const b1 = attempt("resent-version", 1);
  const firstBegin = await beginOwnedAttempt(store, b1, { mode: { kind: "running" } });
  const lossyVersion = await replyLosingClient(server.port, "v-first", async () => {
    seen.takeover = await beginOwnedAttempt(store, { ...b1, workerId: "w2" }, { mode: { kind: "running" } });
  });
  try {
    const versioned = await recordVersion({ ...store, client: lossyVersion.main }, b1, {
      fields: { version: "v-first" },
      idempotencyKey: null,
      owner: firstBegin.beginId,
    });
    assert.ok(lossyVersion.cut(), "the version write's reply was dropped");
    assert.equal(seen.takeover?.status, "began");
    assert.equal(versioned.status, "foreign", "the resend finds the record another pickup's");
  } finally {
    await lossyVersion.close();
  }
  const taken = await readRun(client, keys, b1.runId);
  assert.equal(taken?.workerId, "w2");
  assert.equal(taken?.version ?? null, null, "the first pickup's version is not on the second's record");
  assert.equal(
    (await recordVersion(store, b1, { fields: { version: "v2" }, idempotencyKey: null, owner: seen.takeover!.beginId }))
      .status,
    "began",
  );
});

test("the recorder's final write applied but answered with an error: its retry writes nothing twice", async () => {
  const keys = redisKeys(uniquePrefix());
  const a1 = attempt("lost-reply", 1);
  await beginAttempt(storeOf(keys), a1, { mode: { kind: "running" } });
  const flaky = new Redis(server.url);
  flaky.defineCommand(RUN_WRITE.command, { lua: RUN_WRITE.lua }); // variadic: the key count comes first
  const method = flaky as unknown as Record<string, (...args: unknown[]) => Promise<unknown>>;
  const original = method[RUN_WRITE.command]!.bind(flaky);
  let failed = false;
  method[RUN_WRITE.command] = async (...args: unknown[]) => {
    const reply = await original(...args);
    if (failed) return reply;
    failed = true;
    throw new Error("connection reset before the reply");
  };
  try {
    const recorder = new RunRecorder({ client: flaky, keys, retention: DEFAULT_RETENTION }, a1);
    recorder.log("published b1");
    await assert.rejects(recorder.finish("rebuilt", { buildHash: "b1" }));
    assert.equal(await recorder.finish("rebuilt", { buildHash: "b1" }), "written");
  } finally {
    flaky.disconnect();
  }
  assert.equal((await readRunLog(client, keys, a1.runId)).length, 1);
  assert.equal(await client.hget(keys.metricsCounters, "runs|tiles|acme|rebuilt"), "1");
});

test("intermediate writes carry the configured retention", async () => {
  const keys = redisKeys(uniquePrefix());
  const store = storeOf(keys, { maxPerRebuild: 10, maxAgeMs: 60_000 });
  const a1 = attempt("ret", 1);
  await beginAttempt(store, a1, { mode: { kind: "running" } });
  await client.pexpire(keys.run(a1.runId), 999_999_999);
  await writeRun(store, a1, { fields: { progress: 0.2 }, logLines: ["l"] });
  const limit = 60_000 + 86_400_000;
  assert.ok((await client.pttl(keys.run(a1.runId))) <= limit, "record");
  assert.ok((await client.pttl(keys.runLog(a1.runId))) <= limit, "log");
});

/**
 * Every key of `keys`' prefix as it is now; the returned function puts them back (keys made since
 * are deleted): what a failover to a replica that had not received the writes since does.
 */
async function snapshotPrefix(keys: RedisKeys): Promise<() => Promise<void>> {
  const pattern = `${keys.workerRegistry.slice(0, keys.workerRegistry.indexOf(":") + 1)}*`;
  const list = async () => {
    const found: string[] = [];
    let cursor = "0";
    do {
      const [next, batch] = await client.scan(cursor, "MATCH", pattern, "COUNT", 1000);
      found.push(...batch);
      cursor = next;
    } while (cursor !== "0");
    return found;
  };
  const saved = await Promise.all(
    (await list()).map(async (key) => ({ key, dump: await client.dumpBuffer(key), ttl: await client.pttl(key) })),
  );
  return async () => {
    for (const key of await list()) await client.del(key);
    for (const { key, dump, ttl } of saved) if (dump) await client.restore(key, ttl > 0 ? ttl : 0, dump, "REPLACE");
  };
}

test("a final record the main Redis lost (a failover) is written again by its worker's sweep, not closed aborted", async () => {
  const keys = redisKeys(uniquePrefix());
  const store = storeOf(keys);
  const a1 = attempt("lost-final", 1, "self");
  const begun = await beginOwnedAttempt(store, a1, { mode: { kind: "running" } });
  await client.hset(keys.workerHeartbeat("self"), "id", "self");
  const lose = await snapshotPrefix(keys);
  const recorder = new RunRecorder(store, a1);
  recorder.ownedBy(begun.beginId);
  assert.equal(await recorder.finish("rebuilt", { buildHash: "b-lost" }), "written");
  await lose(); // the replica promoted had the record still running
  assert.equal((await readRun(client, keys, a1.runId))?.status, "running");

  // A resend that fails (READONLY right after the failover): left for the next sweep, not aborted.
  const failing = {
    workerId: "self",
    activeJobIds: () => [],
    resendFinal: () => Promise.reject(new Error("READONLY You can't write against a read only replica.")),
  };
  assert.deepEqual(await closeAbandonedRuns(store, failing), []);
  assert.equal((await readRun(client, keys, a1.runId))?.status, "running");

  const sweeper = { workerId: "self", activeJobIds: () => [], resendFinal: resendFinalWrite };
  assert.deepEqual(await closeAbandonedRuns(store, sweeper), [], "nothing closed as abandoned");
  const record = await readRun(client, keys, a1.runId);
  assert.deepEqual([record?.status, record?.buildHash], ["rebuilt", "b-lost"]);
  assert.deepEqual(await statusesListing(keys, a1.runId), onlyIn("rebuilt"));

  // Without the kept write (another process's run, or too long ago) the sweep closes it aborted.
  const b1 = attempt("lost-elsewhere", 1, "self");
  await beginAttempt(store, b1, { mode: { kind: "running" } });
  assert.deepEqual(await closeAbandonedRuns(store, sweeper), [b1.runId]);
  assert.equal((await readRun(client, keys, b1.runId))?.status, "aborted");
});

test("a final write sent again after the main Redis lost it records its fence in the lane but does not mark its version again: the output may serve a newer publish the same loss took (black-box helper-116)", async () => {
  const keys = redisKeys(uniquePrefix());
  const store = storeOf(keys);
  const a1 = attempt("resent-older", 1, "self");
  const begun = await beginOwnedAttempt(store, a1, { mode: { kind: "running" } });
  await client.hset(keys.workerHeartbeat("self"), "id", "self");
  const lose = await snapshotPrefix(keys);
  const recorder = new RunRecorder(store, a1);
  recorder.ownedBy(begun.beginId);
  assert.equal(
    await recorder.finish(
      "rebuilt",
      { buildHash: "b-s8", fence: 32 },
      { change: "set", key: "h-s8", ttlMs: 60_000, fence: 32 },
    ),
    "written",
  );
  assert.equal(await client.get(keys.idempotency("h-s8")), a1.runId);
  const ended = await readRun(client, keys, a1.runId);
  // s9 published after it with fence 34; a crash of the main Redis took both records, the marks
  // and the lane (the output serves s9: the claims Redis and the disk say so).
  await lose();
  await new Promise((resolve) => setTimeout(resolve, 1_200)); // the resend comes well after the end
  const sweeper = { workerId: "self", activeJobIds: () => [], resendFinal: resendFinalWrite };
  assert.deepEqual(await closeAbandonedRuns(store, sweeper), [], "written again, not closed as abandoned");
  const resent = await readRun(client, keys, a1.runId);
  assert.equal(resent?.status, "rebuilt");
  // It ended when its final write was first sent, not when it was sent again (black-box helper-121).
  assert.ok(
    Math.abs((resent?.finishedAt ?? 0) - (ended?.finishedAt ?? 0)) < 500,
    `finished at ${resent?.finishedAt}, first written ${ended?.finishedAt}`,
  );
  assert.equal(resent?.durationMs, (resent?.finishedAt ?? 0) - (resent?.startedAt ?? 0));
  assert.equal(await client.get(keys.idempotency("h-s8")), null, "s8 not marked again");
  assert.equal(await client.hget(keys.rebuiltNow(TEST_LANE), "fence"), "32", "its fence is the lane's");
  assert.equal(
    (await beginAttempt(store, attempt("resent-s8-again", 1), { mode: { kind: "check", idempotencyKey: "h-s8" } }))
      .status,
    "began",
    "a request for s8 builds",
  );
});

test("the sweep closes in-flight runs of workers without a heartbeat, and the sweeping worker's own whose job it no longer runs; only those", async () => {
  const keys = redisKeys(uniquePrefix());
  const store = storeOf(keys);
  await beginAttempt(store, attempt("live", 1, "alive"), { mode: { kind: "running" } });
  await beginAttempt(store, attempt("dead", 1, "gone"), { mode: { kind: "running" } });
  await beginAttempt(store, attempt("done", 1, "gone"), { mode: { kind: "running" } });
  await writeRun(store, attempt("done", 1), { status: "rebuilt" });
  await client.hset(keys.workerHeartbeat("alive"), "id", "alive");

  assert.deepEqual(await closeAbandonedRuns(store), ["dead-a1"]);
  assert.equal((await readRun(client, keys, "live-a1"))?.status, "running");
  const dead = await readRun(client, keys, "dead-a1");
  assert.equal(dead?.status, "aborted");
  assert.match(dead?.reason ?? "", /worker gone stopped beating/);
  assert.deepEqual(await statusesListing(keys, "dead-a1"), onlyIn("aborted"));
  assert.equal((await readRun(client, keys, "done-a1"))?.status, "rebuilt");
  assert.equal(await client.exists(keys.runOpenAttempt("dead")), 0);

  assert.equal(await abandonRun(store, attempt("live", 1), "closed by hand"), true);
  assert.equal(await abandonRun(store, attempt("live", 1), "again"), false, "a final record stays");

  // A worker's own records whose job it no longer runs (their final write failed): closed by its
  // sweep, though it beats; those of jobs it runs, and another live worker's, are left.
  await beginAttempt(store, attempt("left", 1, "self"), { mode: { kind: "running" } });
  await beginAttempt(store, attempt("runs", 1, "self"), { mode: { kind: "running" } });
  await beginAttempt(store, attempt("other", 1, "alive"), { mode: { kind: "running" } });
  await client.hset(keys.workerHeartbeat("self"), "id", "self");
  assert.deepEqual(await closeAbandonedRuns(store), [], "every worker beats");
  assert.deepEqual(await closeAbandonedRuns(store, { workerId: "self", activeJobIds: () => ["runs"] }), ["left-a1"]);
  const left = await readRun(client, keys, "left-a1");
  assert.equal(left?.status, "aborted");
  assert.match(left?.reason ?? "", /worker self no longer runs this attempt/);
  assert.equal((await readRun(client, keys, "runs-a1"))?.status, "running");
  assert.equal((await readRun(client, keys, "other-a1"))?.status, "running");
});

test("trimming removes old and excess runs from every index, never a run in flight", async () => {
  const keys = redisKeys(uniquePrefix());
  const store = storeOf(keys);
  // The oldest run is a long one still running; newer duplicates finished.
  await beginAttempt(store, attempt("long", 1), { mode: { kind: "running" } });
  for (let i = 0; i < 3; i++) {
    await new Promise((r) => setTimeout(r, 2));
    await beginAttempt(store, attempt(`dup${i}`, 1), { mode: { kind: "final", status: "skipped", reason: "dup" } });
  }
  await client.del(keys.run("dup0-a1")); // its backstop TTL ran out before any trim
  const removed = await trimRuns(client, keys, {
    rebuild: "tiles",
    tenant: "acme",
    retention: { maxPerRebuild: 1, maxAgeMs: 86_400_000 },
  });
  assert.equal(removed, 2, "dup0 (expired hash) and dup1; the running one is kept");
  const indexes = [
    keys.runIndex(),
    keys.runIndex({ rebuild: "tiles" }),
    keys.runIndex({ rebuild: "tiles", tenant: "acme" }),
  ];
  for (const status of RUN_STATUSES) {
    indexes.push(keys.runIndex({ status }), keys.runIndex({ rebuild: "tiles", status }));
    indexes.push(keys.runIndex({ rebuild: "tiles", tenant: "acme", status }));
  }
  const left = new Set<string>();
  for (const index of indexes) for (const id of await client.zrange(index, "0", "-1")) left.add(id);
  assert.deepEqual([...left].sort(), ["dup2-a1", "long-a1"]);
  assert.equal((await readRun(client, keys, "long-a1"))?.status, "running");
  assert.equal(await writeRun(store, attempt("long", 1), { status: "rebuilt" }), "written", "its final write lands");
});

test("an aborted run beyond the count leaves the listings at its turn, so it never outlives a newer run as the last one; its record stays final for its late pickup an hour (black-box helper-123)", async () => {
  const keys = redisKeys(uniquePrefix());
  const store = storeOf(keys);
  const tick = () => new Promise((r) => setTimeout(r, 2));
  // The oldest attempt was killed (aborted just now); a newer one rebuilt; two newer requests skipped.
  const killed = attempt("killed", 1);
  await beginAttempt(store, killed, { mode: { kind: "running" } });
  assert.equal(await writeRun(store, killed, { status: "aborted", fields: { reason: "worker died" } }), "written");
  await tick();
  const built = attempt("built", 1);
  await beginAttempt(store, built, { mode: { kind: "running" } });
  assert.equal(await writeRun(store, built, { status: "rebuilt", fields: { buildHash: "abc" } }), "written");
  for (const name of ["skip1", "skip2"]) {
    await tick();
    await beginAttempt(store, attempt(name, 1), {
      mode: { kind: "final", status: "skipped", reason: "already-rebuilt" },
    });
  }
  const removed = await trimRuns(client, keys, {
    rebuild: "tiles",
    tenant: "acme",
    retention: { maxPerRebuild: 2, maxAgeMs: 86_400_000 },
  });
  assert.equal(removed, 2);
  const listed = await listRuns(client, keys, { rebuild: "tiles", tenant: "acme" }, 50);
  assert.deepEqual(
    listed.runs.map((run) => run.id),
    ["skip2-a1", "skip1-a1"],
    "the newest two; not the older abort in place of the newer build",
  );
  assert.deepEqual(await statusesListing(keys, killed.runId), [], "in no listing");
  // Its record stays final for its pickup, if it wakes: a late write changes nothing, recreates nothing.
  const ttl = await client.pttl(keys.run(killed.runId));
  assert.ok(ttl > 0 && ttl <= ABORTED_KEPT_MS, `kept until an hour after it ended (${ttl} ms)`);
  assert.equal(
    await writeRun(store, killed, { status: "rebuilt", fields: { buildHash: "late" }, logLines: ["late line"] }),
    "final",
  );
  assert.equal((await readRun(client, keys, killed.runId))?.status, "aborted");
  assert.deepEqual(await statusesListing(keys, killed.runId), []);
  // Nor among its job's attempts (looked up by id); and its log does not outlive it (review helper-125).
  assert.deepEqual((await listRuns(client, keys, { jobId: killed.jobId }, 10)).runs, []);
  // Read after the log's (a loaded machine takes milliseconds between the two reads): a second of slack.
  const logTtl = await client.pttl(keys.runLog(killed.runId));
  const runTtl = await client.pttl(keys.run(killed.runId));
  assert.ok(logTtl > 0 && logTtl <= runTtl + 1_000, `log ${logTtl} ms, run ${runTtl} ms`);
  assert.equal(await client.exists(keys.run(built.runId)), 0, "the build's record is trimmed");
  // Closed late (a sweep after an outage): last seen two hours ago, closed now. Its pickup may wake
  // any time after the close, so the hour runs from then.
  const late = attempt("late-closed", 1);
  await beginAttempt(store, late, { mode: { kind: "running" } });
  assert.equal(await writeRun(store, late, { status: "aborted", fields: { reason: "worker died" } }), "written");
  const now = Number((await client.time())[0]) * 1000;
  await client.hset(keys.run(late.runId), "finishedAt", now - 7_200_000, "closedAt", now);
  await trimRuns(client, keys, {
    rebuild: "tiles",
    tenant: "acme",
    retention: { maxPerRebuild: 0, maxAgeMs: 86_400_000 },
  });
  assert.equal((await readRun(client, keys, late.runId))?.status, "aborted", "kept: closed just now");
  assert.deepEqual(await statusesListing(keys, late.runId), []);
  // Trimming again leaves it as it is.
  assert.equal(
    await trimRuns(client, keys, {
      rebuild: "tiles",
      tenant: "acme",
      retention: { maxPerRebuild: 2, maxAgeMs: 86_400_000 },
    }),
    0,
  );
  assert.equal((await readRun(client, keys, killed.runId))?.status, "aborted");
});

test("with more runs in flight than a sweep reads, the sweeps page on: a dead worker's run behind them is closed", async () => {
  const keys = redisKeys(uniquePrefix());
  const store = storeOf(keys);
  for (let i = 0; i < SWEEP_BATCH; i++) {
    await beginAttempt(store, attempt(`long-${String(i).padStart(3, "0")}`, 1, "alive"), { mode: { kind: "running" } });
  }
  await beginAttempt(store, attempt("zz-dead", 1, "gone"), { mode: { kind: "running" } });
  await client.hset(keys.workerHeartbeat("alive"), "id", "alive");
  // The sweeper's own heartbeat: a streak of a whole TTL, its last beat a second ago (BEAT_STREAK).
  const now = await serverNow(client);
  await client.hset(keys.workerHeartbeat("sweeper"), {
    id: "sweeper",
    heartbeatAt: now - 1_000,
    beatStreakSince: now - 2 * HEARTBEAT_TTL_MS,
  });
  const sweeper = { workerId: "sweeper", activeJobIds: () => [], judgesOthers: true };
  assert.deepEqual(await closeAbandonedRuns(store, sweeper), [], "the first page: all live");
  assert.deepEqual(await closeAbandonedRuns(store, sweeper), [], "without a cursor, always the first page");

  const cursor = { running: 0, queued: 0 };
  assert.deepEqual(await closeAbandonedRuns(store, { ...sweeper, cursor }), []);
  assert.equal(cursor.running, SWEEP_BATCH, "a full page: the next sweep reads on");
  assert.deepEqual(await closeAbandonedRuns(store, { ...sweeper, cursor }), ["zz-dead-a1"]);
  assert.equal(cursor.running, 0, "a short page: back to the start");
  assert.equal((await readRun(client, keys, "zz-dead-a1"))?.status, "aborted");
});

test("a record closed as abandoned: its running step is closed as aborted (in either stored form), and the live stream hears of it", async () => {
  const keys = redisKeys(uniquePrefix());
  const store = storeOf(keys);
  const started = Date.now() - 5_000;
  const steps = [
    { name: "fetch", status: "done" as const, startedAt: started, finishedAt: started + 1_000 },
    { name: "tile", status: "running" as const, startedAt: started + 1_000, finishedAt: null },
  ];
  // Packed (a plain name), and JSON (a name the packed form cannot carry).
  for (const [job, name] of [
    ["packed", "tile"],
    ["json", "tile step"],
  ] as const) {
    const run = attempt(job, 1, "gone");
    await beginAttempt(store, run, { mode: { kind: "running" } });
    await client.hset(keys.run(run.runId), toFields({ steps: [steps[0]!, { ...steps[1]!, name }] }));
    const before = await client.xlen(keys.events);
    assert.deepEqual(await closeAbandonedRuns(store), [run.runId]);
    const record = await readRun(client, keys, run.runId);
    assert.equal(record?.status, "aborted");
    assert.deepEqual(
      record?.steps.map((s) => [s.name, s.status, s.finishedAt !== null && s.finishedAt >= s.startedAt]),
      [
        ["fetch", "done", true],
        [name, "aborted", true],
      ],
    );
    const entries = await client.xrange(keys.events, "-", "+");
    assert.equal(entries.length, before + 1, "one event for the close");
    const event = JSON.parse(entries.at(-1)![1][1]!) as { type: string; run: Record<string, unknown> };
    assert.equal(event.type, "run");
    assert.deepEqual(
      [event.run.id, event.run.status, event.run.rebuild, event.run.tenant, event.run.reason],
      [run.runId, "aborted", "tiles", "acme", record?.reason],
    );
    assert.deepEqual(event.run.steps, record?.steps);
  }
});

test("trimming by count is per tenant where there are tenants: one tenant's many runs never trim another's few", async () => {
  const keys = redisKeys(uniquePrefix());
  const store = storeOf(keys);
  const skipped = (job: string, tenant: string) =>
    beginAttempt(store, testAttempt(job, 1, { tenant }), { mode: { kind: "final", status: "skipped", reason: "dup" } });
  for (let i = 0; i < 2; i++) await skipped(`acme${i}`, "acme"); // the older, few
  for (let i = 0; i < 6; i++) await skipped(`globex${i}`, "globex"); // the newer, many
  const retention = { ...DEFAULT_RETENTION, maxPerRebuild: 3 };
  const definitions = { rebuilds: new Map([["tiles", { name: "tiles", tenants: ["acme", "globex"] }]]) };
  await trimAllRuns(client, keys, definitions, retention);
  const kept = await client.zrange(keys.runIndex({ rebuild: "tiles" }), "0", "-1");
  assert.deepEqual(kept.filter((id) => id.startsWith("acme")).sort(), ["acme0-a1", "acme1-a1"]);
  assert.equal(kept.filter((id) => id.startsWith("globex")).length, 3);
});

test("a final record Redis refused (NOREPLICAS, as after a failover) is sent again by a stopping worker's flush once Redis takes writes", async (t) => {
  const keys = redisKeys(uniquePrefix());
  const store = storeOf(keys);
  const a1 = attempt("norepl", 1);
  await beginAttempt(store, a1, { mode: { kind: "running" } });
  // A primary that wants a replica it does not have refuses every write, as a Sentinel group's
  // new primary did while its replicas resynced.
  await client.config("SET", "min-replicas-to-write", "1");
  t.after(() => client.config("SET", "min-replicas-to-write", "0"));
  const recorder = new RunRecorder(store, a1);
  await assert.rejects(recorder.finish("rebuilt", { buildHash: "b-norepl" }), /NOREPLICAS/);
  assert.equal((await readRun(client, keys, a1.runId))?.status, "running");
  // Still refused: the flush tries until its time is up, and writes nothing.
  assert.deepEqual(await flushUnansweredFinals(300), []);
  setTimeout(() => void client.config("SET", "min-replicas-to-write", "0"), 200);
  assert.deepEqual(await flushUnansweredFinals(5_000), [a1.runId]);
  const record = await readRun(client, keys, a1.runId);
  assert.deepEqual([record?.status, record?.buildHash], ["rebuilt", "b-norepl"]);
  assert.deepEqual(await flushUnansweredFinals(1_000), [], "answered: not sent again");
});
