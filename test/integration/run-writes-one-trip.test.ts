/**
 * What a run-record script writes beside the record, in the same round trip, against a real
 * redis-server: the live stream's event (RUN_BEGIN with the status it chose, RUN_WRITE for fields
 * and for log lines, nothing for a write that was refused); the run counters behind /metrics,
 * counted exactly once per attempt whichever way it became final, with a duration only for an
 * attempt that ran and was seen to end; and the job's cancel request, read by RUN_BEGIN, which
 * records a cancelled job cancelled whatever the mode (not skipped, not failed). Then real worker
 * processes that pick up jobs with cancel requests left for them (the cancel raced the pickup):
 * they end cancelled, build and publish nothing, are not retried, also when the inputs cannot be
 * read.
 */
import assert from "node:assert/strict";
import { after, test } from "node:test";
import { Redis } from "ioredis";
import { decodeEntry } from "../../lib/events/publish";
import type { StoredEvent } from "../../lib/events/types";
import { CancelWatch, describeCancel, writeCancelRequest } from "../../lib/rebuilds/cancel-request";
import { redisKeys, type RedisKeys } from "../../lib/redis/keys";
import { abandonRun } from "../../lib/runs/abandoned";
import { DEFAULT_RETENTION, readRun } from "../../lib/runs/records";
import { runEventHead, writeRun, type AttemptIdentity, type RunStore } from "../../lib/runs/writer";
import { beginAttemptResult as beginAttempt, testAttempt } from "../support/runs";
import { runRebuild, type RebuildJob } from "../../lib/rebuilds/run-rebuild";
import { createTestBed, rebuildDepsOf, slowStep, type TestBed } from "../support/stack";
import { startTestRedis, stopTestRedis, uniquePrefix } from "../support/redis";
import { until } from "../support/until";

const server = await startTestRedis();
const client = new Redis(server.url);
const beds: TestBed[] = [];
after(async () => {
  for (const bed of beds) await bed.close();
  client.disconnect();
  await stopTestRedis(server);
});

const storeOf = (keys: RedisKeys): RunStore => ({ client, keys, retention: DEFAULT_RETENTION });

function attempt(jobId: string, n: number, rebuild: string | null = "tiles"): AttemptIdentity {
  return testAttempt(jobId, n, {
    rebuild,
    tenant: rebuild ? "acme" : null,
    rebuildName: rebuild ?? "no such rebuild!",
  });
}

async function events(keys: RedisKeys): Promise<StoredEvent[]> {
  const entries = await client.xrange(keys.events, "-", "+");
  return entries.map(([, fields]) => decodeEntry(fields)).filter((event): event is StoredEvent => event !== null);
}

const counters = async (keys: RedisKeys) => client.hgetall(keys.metricsCounters);

test("the record's event is written by the script that writes the record, with the status it chose", async () => {
  const keys = redisKeys(uniquePrefix("run-events"));
  const store = storeOf(keys);
  const a = attempt("job", 1);
  await beginAttempt(store, a, { mode: { kind: "check", idempotencyKey: "k" }, fields: { version: "v1" } });
  await client.set(keys.idempotency("k"), "job-a1");
  const b = attempt("dup", 1);
  await beginAttempt(store, b, { mode: { kind: "check", idempotencyKey: "k" }, fields: { version: "v1" } });
  assert.equal(await writeRun(store, { ...a, runId: a.runId }, { fields: { progress: 0.5 } }), "written");
  assert.equal(await writeRun(store, a, { logLines: ["one line"] }), "written");
  // As the recorder sends its lines: with the fields it has (none) — no run event either (helper-131).
  assert.equal(await writeRun(store, a, { fields: {}, logLines: ["two"] }), "written");
  assert.equal(await writeRun(store, a, { status: "rebuilt", fields: { buildHash: "h1" } }), "written");
  const before = (await events(keys)).length;
  assert.equal(await writeRun(store, a, { status: "failed" }), "final", "a final record is not changed");
  assert.equal(await writeRun(store, attempt("gone", 1), { fields: { progress: 1 } }), "missing");

  const all = await events(keys);
  assert.equal(all.length, before, "a refused or missing write publishes nothing");
  const runEvents = all.filter((e): e is Extract<StoredEvent, { type: "run" }> => e.type === "run");
  assert.deepEqual(
    runEvents.map((e) => [e.run.id, e.run.status ?? null]),
    [
      ["job-a1", "running"],
      ["dup-a1", "skipped"],
      ["job-a1", null], // fields; the log-only write has only its run.log event
      ["job-a1", "rebuilt"],
    ],
  );
  assert.equal(runEvents[0]!.run.version, "v1");
  assert.equal(runEvents[0]!.run.jobId, "job");
  assert.equal(runEvents[0]!.run.rebuild, "tiles");
  assert.equal(runEvents[3]!.run.buildHash, "h1");
  assert.deepEqual(
    all.filter((e) => e.type === "run.log"),
    [
      { type: "run.log", id: "job-a1" },
      { type: "run.log", id: "job-a1" },
    ],
  );
});

test("every way into a final status counts the run once in the metrics counters; a duration only when it ran and was seen to end", async () => {
  const keys = redisKeys(uniquePrefix("run-counters"));
  const store = storeOf(keys);
  const series = "tiles|acme";
  // Ran and ended: rebuilt, then failed.
  const ok = attempt("ok", 1);
  await beginAttempt(store, ok, { mode: { kind: "running" } });
  await new Promise((r) => setTimeout(r, 20));
  await writeRun(store, ok, { status: "rebuilt" });
  const failed = attempt("bad", 1);
  await beginAttempt(store, failed, { mode: { kind: "running" } });
  await writeRun(store, failed, { status: "failed" });
  // Did not run: already rebuilt (skipped), ended where it began, deferred.
  await client.set(keys.idempotency("k"), "ok-a1");
  await beginAttempt(store, attempt("dup", 1), { mode: { kind: "check", idempotencyKey: "k" } });
  await beginAttempt(store, attempt("early", 1), { mode: { kind: "final", status: "failed", reason: "inputs" } });
  const later = attempt("later", 1);
  await beginAttempt(store, later, { mode: { kind: "running" } });
  await writeRun(store, later, { status: "deferred" });
  // Nobody saw it end: closed by the next attempt, and by the abandoned-run sweep.
  await beginAttempt(store, attempt("dead", 1), { mode: { kind: "running" } });
  await beginAttempt(store, attempt("dead", 2), { mode: { kind: "running" } });
  const stuck = attempt("stuck", 1);
  await beginAttempt(store, stuck, { mode: { kind: "running" } });
  assert.equal(await abandonRun(store, stuck, "gone"), true);
  // Writes that change nothing count nothing.
  await writeRun(store, ok, { status: "failed" });
  assert.equal(await abandonRun(store, stuck, "again"), false);
  // A run that names no valid rebuild has no series.
  await beginAttempt(store, attempt("nameless", 1, null), { mode: { kind: "final", status: "failed", reason: "x" } });

  const hash = await counters(keys);
  const runs = Object.fromEntries(
    Object.entries(hash)
      .filter(([field]) => field.startsWith("runs|"))
      .map(([field, value]) => [field, Number(value)]),
  );
  assert.deepEqual(runs, {
    [`runs|${series}|rebuilt`]: 1,
    [`runs|${series}|failed`]: 2,
    [`runs|${series}|skipped`]: 1,
    [`runs|${series}|deferred`]: 1,
    [`runs|${series}|aborted`]: 2,
  });
  assert.equal(Number(hash[`durcount|${series}`]), 2, "durations of the rebuilt and the failed run only");
  const bucketed = Object.entries(hash)
    .filter(([field]) => field.startsWith(`dur|${series}|`))
    .reduce((sum, [, value]) => sum + Number(value), 0);
  assert.equal(bucketed, 2);
  const okRecord = await readRun(client, keys, ok.runId);
  assert.ok(Number(hash[`dursum|${series}`]) >= 0.02, `dursum ${hash[`dursum|${series}`]}`);
  assert.equal(Number(hash[`lastsuccess|${series}`]), okRecord?.finishedAt, "the rebuilt record's finish, Redis clock");
  assert.ok(!Object.keys(hash).some((field) => field.startsWith("runs||")), "the nameless run is in no series");
});

test("a job with a cancel request begins and ends cancelled, whatever the mode: not skipped, not failed, no duration", async () => {
  const keys = redisKeys(uniquePrefix("run-cancel"));
  const store = storeOf(keys);
  await client.set(keys.idempotency("k"), "earlier-a1");
  const request = { actor: "ops", reason: "wrong input", at: 1 };
  for (const job of ["check", "running", "failing", "own", "garbled"]) {
    await writeCancelRequest(client, keys, job, request);
  }
  await client.set(keys.cancelRequest("garbled"), "{not json");
  const check = await beginAttempt(store, attempt("check", 1), { mode: { kind: "check", idempotencyKey: "k" } });
  assert.deepEqual(check, {
    status: "cancelled",
    reason: describeCancel(request),
    cancelRequest: JSON.stringify(request),
  });
  const running = await beginAttempt(store, attempt("running", 1), { mode: { kind: "running" } });
  assert.equal(running.status, "cancelled");
  const failing = await beginAttempt(store, attempt("failing", 1), {
    mode: { kind: "final", status: "failed", reason: "inputs unreadable" },
  });
  assert.equal(failing.status, "cancelled", "an operator's cancel is what the history says, not the failure");
  // A caller that begins it cancelled itself keeps its own reason.
  const own = await beginAttempt(store, attempt("own", 1), {
    mode: { kind: "final", status: "cancelled", reason: "cancelled by the caller" },
  });
  assert.equal(own.status, "ended");
  assert.equal((await readRun(client, keys, "own-a1"))?.reason, "cancelled by the caller");
  // A request that cannot be read still cancels.
  const garbled = await beginAttempt(store, attempt("garbled", 1), { mode: { kind: "check", idempotencyKey: "k" } });
  assert.deepEqual(garbled, { status: "cancelled", reason: "cancelled by an operator", cancelRequest: "{not json" });

  for (const job of ["check", "running", "failing"]) {
    const record = await readRun(client, keys, `${job}-a1`);
    assert.equal(record?.status, "cancelled", job);
    assert.equal(record?.reason, describeCancel(request), job);
    assert.equal(record?.durationMs, 0, job);
  }
  const hash = await counters(keys);
  assert.equal(hash["runs|tiles|acme|cancelled"], "5");
  assert.equal(hash["durcount|tiles|acme"], undefined, "a cancelled begin never ran: no duration");
  const statuses = (await events(keys)).flatMap((e) => (e.type === "run" ? [e.run.status] : []));
  assert.deepEqual(statuses, ["cancelled", "cancelled", "cancelled", "cancelled", "cancelled"]);
  // Without a request, the same check skips.
  const other = await beginAttempt(store, attempt("other", 1), { mode: { kind: "check", idempotencyKey: "k" } });
  assert.deepEqual(other, { status: "already-rebuilt", rebuiltBy: "earlier-a1", cancelRequest: null });
});

test("the worker's cancel watch agrees with RUN_BEGIN: an unreadable request cancels too, with the same reason", async () => {
  const keys = redisKeys(uniquePrefix("cancel-watch"));
  const request = { actor: "ops", reason: "wrong input", at: 1 };
  await writeCancelRequest(client, keys, "fine", request);
  await client.set(keys.cancelRequest("garbled"), "{not json");
  await client.set(keys.cancelRequest("wrong-shape"), JSON.stringify({ actor: 7 }));
  const found = new Map<string, string>();
  const watch = new CancelWatch(
    client,
    keys,
    () => ["fine", "garbled", "wrong-shape", "none"],
    (jobId, seen) => found.set(jobId, describeCancel(seen)),
    20,
  );
  watch.start();
  try {
    for (let i = 0; i < 200 && found.size < 3; i++) await new Promise((r) => setTimeout(r, 10));
  } finally {
    watch.stop();
  }
  assert.deepEqual(Object.fromEntries(found), {
    fine: "cancelled by ops: wrong input",
    garbled: "cancelled by an operator",
    "wrong-shape": "cancelled by an operator",
  });
  // The same words RUN_BEGIN writes for each.
  const store = storeOf(keys);
  for (const job of ["fine", "garbled", "wrong-shape"]) {
    const begun = await beginAttempt(store, attempt(job, 1), { mode: { kind: "running" } });
    assert.equal(begun.status, "cancelled", job);
    assert.equal((await readRun(client, keys, `${job}-a1`))?.reason, found.get(job), job);
  }
});

test("the run event's head, completed with any status, is the JSON of the record's event", () => {
  const fields = { id: "r-a1", rebuild: "tiles", tenant: null, reason: 'a "quoted" \\ reason\n', progress: 0.5 };
  for (const status of ["running", "skipped", "cancelled", "failed"]) {
    const json = `${runEventHead({ ...fields, status: "ignored" })}${status}"}}`;
    assert.deepEqual(JSON.parse(json), { type: "run", run: { ...fields, status } });
  }
});

/**
 * The job's state once BullMQ has moved it on from active: the worker records the run before it
 * throws, and BullMQ fails (or retries) the job after that — read at once, it may still be active.
 */
async function settledState(bed: TestBed, jobId: string): Promise<string> {
  return until(
    `job ${jobId} no longer active`,
    async () => {
      const state = await (await bed.queue.getJob(jobId))?.getState();
      return state !== "active" && state;
    },
    30_000,
  );
}

test("a worker that picks up jobs whose cancel raced the pickup ends them cancelled: no claim, no build, no retry", async () => {
  const bed = await createTestBed({ c: { output: "out/c", steps: [slowStep(0)] } });
  beds.push(bed);
  let worker = await bed.startWorker();
  const first = await bed.trigger("c", { version: "v1" });
  await bed.waitForRun((r) => r.jobId === first && r.status === "rebuilt", 60_000, "v1 rebuilt");
  await worker.stop();

  // Left waiting with a request, as when the cancel API found the job locked by a worker's pickup.
  const repeat = await bed.trigger("c", { version: "v1" }); // would be skipped: already rebuilt
  const fresh = await bed.trigger("c", { version: "v2" }); // would build and publish
  for (const jobId of [repeat, fresh]) {
    await writeCancelRequest(bed.main, bed.keys, jobId, { actor: "ops", reason: "raced the pickup", at: Date.now() });
  }
  worker = await bed.startWorker();
  for (const jobId of [repeat, fresh]) {
    const run = await bed.waitForRun(
      (r) => r.jobId === jobId && r.status === "cancelled",
      60_000,
      `${jobId} cancelled`,
    );
    assert.match(run.reason ?? "", /cancelled by ops: raced the pickup/);
    assert.equal(run.fence, null, "no claim was granted");
    assert.equal(run.buildHash, null, "nothing built");
  }
  for (const jobId of [repeat, fresh]) {
    assert.equal(await settledState(bed, jobId), "failed", "a cancel is not retried");
    assert.equal((await bed.runsOfJob(jobId)).length, 1, "one attempt");
  }
  // Checked once the worker has stopped: its upkeep takes the output's claim a moment to prune old
  // builds (after jobs, and at every beat), which a check while it runs can meet.
  await worker.stop();
  assert.equal(await bed.claims.zcard(bed.keys.claimRegistry), 0, "no claim held");
  const hash = await bed.main.hgetall(bed.keys.metricsCounters);
  assert.equal(hash["runs|c||cancelled"], "2");
  assert.equal(hash["durcount|c|"], "1", "only v1's rebuild has a duration");
});

test("a cancel that raced the pickup of a job whose inputs cannot be read: cancelled, not failed, not retried", async () => {
  const bed = await createTestBed({ d: { output: "out/d", inputs: ["missing-input.txt"], steps: [slowStep(0)] } });
  beds.push(bed);
  const jobId = await bed.trigger("d", {});
  await writeCancelRequest(bed.main, bed.keys, jobId, { actor: "ops", reason: "replacing the input", at: Date.now() });
  const worker = await bed.startWorker();
  const run = await bed.waitForRun(
    (r) => r.jobId === jobId && (r.status === "cancelled" || r.status === "failed"),
    60_000,
    "the job's record",
  );
  assert.equal(run.status, "cancelled", `record: ${run.status} (${run.reason})`);
  assert.match(run.reason ?? "", /cancelled by ops: replacing the input/);
  assert.equal(await settledState(bed, jobId), "failed", "a cancel is not retried");
  assert.equal((await bed.runsOfJob(jobId)).length, 1);
  await worker.stop();
});

test("an attempt picked up again after the queue's Redis forgot its pickup (its record exists) still ends on a cancel: nothing built", async () => {
  const bed = await createTestBed({ e: { output: "out/e", steps: [slowStep(0)] } });
  beds.push(bed);
  const deps = rebuildDepsOf(bed);
  const job = (): RebuildJob => ({
    id: "forgotten",
    attempt: 1,
    createdAt: Date.now(),
    data: { rebuild: "e", version: "v1", trigger: "api" as const },
    signal: new AbortController().signal,
  });
  // The first pickup wrote the attempt's record ("running"), then the queue forgot the pickup.
  const store = { client: bed.main, keys: bed.keys, retention: DEFAULT_RETENTION };
  await beginAttempt(
    store,
    { ...attempt("forgotten", 1, "e"), tenant: null, workerId: deps.worker.id },
    { mode: { kind: "running" } },
  );
  await writeCancelRequest(bed.main, bed.keys, "forgotten", { actor: "ops", reason: "stop it", at: 1 });
  const found: string[] = [];
  const outcome = await runRebuild(deps, { ...job(), cancelFound: (request) => found.push(request.actor) });
  assert.deepEqual(outcome, { status: "cancelled", runId: "forgotten-a1", reason: "cancelled by ops: stop it" });
  assert.deepEqual(found, ["ops"]);
  const record = await readRun(bed.main, bed.keys, "forgotten-a1");
  assert.equal(record?.status, "cancelled");
  assert.equal(record?.buildHash, null);
  assert.equal(record?.fence, null, "no claim was granted");
});

test("an attempt whose record exists already and that ends before it began (inputs unreadable) on a cancel ends that record cancelled", async () => {
  const bed = await createTestBed({ f: { output: "out/f", inputs: ["missing-input.txt"], steps: [slowStep(0)] } });
  beds.push(bed);
  const deps = rebuildDepsOf(bed);
  const store = { client: bed.main, keys: bed.keys, retention: DEFAULT_RETENTION };
  // The first pickup wrote the attempt's record ("running"), then the queue forgot the pickup.
  await beginAttempt(
    store,
    { ...attempt("forgotten-f", 1, "f"), tenant: null, workerId: deps.worker.id },
    { mode: { kind: "running" } },
  );
  await writeCancelRequest(bed.main, bed.keys, "forgotten-f", { actor: "ops", reason: "stop it", at: 1 });
  const outcome = await runRebuild(deps, {
    id: "forgotten-f",
    attempt: 1,
    createdAt: Date.now(),
    data: { rebuild: "f", trigger: "api" as const },
    signal: new AbortController().signal,
  });
  assert.deepEqual(outcome, { status: "cancelled", runId: "forgotten-f-a1", reason: "cancelled by ops: stop it" });
  const record = await readRun(bed.main, bed.keys, "forgotten-f-a1");
  assert.equal(record?.status, "cancelled", "the existing record ends cancelled, not left running");
  assert.equal(record?.reason, "cancelled by ops: stop it");
});
