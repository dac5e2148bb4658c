/**
 * Takeovers and records go one way: an attempt whose job lock was lost before it acquired (the
 * job was redelivered, and the later attempt took the claim) never takes the claim back from
 * that later attempt, nor closes its record. It ends `superseded`, without a retry; a later
 * attempt still takes over. An attempt that still holds its job lock is never failed for a
 * holder numbered after it (the queue's Redis lost pickups) nor for an earlier attempt that took
 * the name while it was free: it defers, and the request is kept. Real rebuilds through
 * `runRebuild` against a real redis-server.
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { after, before, test } from "node:test";
import { acquireClaim, claimName, publishFenced, readClaim } from "../../lib/claims";
import { CANCEL_ABORT_REASON } from "../../lib/rebuilds/cancel-request";
import { outputDirOf } from "../../lib/rebuilds/definitions";
import { idempotencyKey } from "../../lib/rebuilds/version";
import { RebuildError, runRebuild, type RebuildDeps, type RebuildJob } from "../../lib/rebuilds/run-rebuild";
import { publishedByRun } from "../../lib/rebuilds/published-by-run";
import {
  pointCurrentAtRecord,
  readPublishedFence,
  readPublishedJobs,
  recordPublishedFence,
} from "../../lib/rebuilds/published-fence";
import { serverNow } from "../../lib/redis/time";
import { DEFAULT_RETENTION, readRun, runPlaceOf } from "../../lib/runs/records";
import { abandonRun, closeAbandonedRuns } from "../../lib/runs/abandoned";
import { listRuns } from "../../lib/runs/list";
import { trimRuns } from "../../lib/runs/trim";
import { beginAttempt, writeRun } from "../../lib/runs/writer";
import { runIdOf } from "../../lib/runs/types";
import { HEARTBEAT_TTL_MS } from "../../lib/workers/heartbeat";
import { createTestBed, rebuildDepsOf, slowStep, type TestBed } from "../support/stack";

let bed: TestBed;
let deps: RebuildDeps;
before(async () => {
  bed = await createTestBed({
    ordered: {
      output: "out/ordered",
      claim: { ttl: "30s", refreshEvery: "5s" },
      steps: [{ name: "write", run: ["sh", "-c", 'echo "$CLAIMWATCH_VERSION" > "$CLAIMWATCH_WORK/v"'] }],
    },
    slow: {
      output: "out/slow",
      claim: { ttl: "4s", refreshEvery: "1s" },
      steps: [slowStep(4)],
    },
    "cancel-twice": {
      output: "out/cancel-twice",
      claim: { ttl: "4s", refreshEvery: "1s" },
      steps: [slowStep(4)],
    },
    twice: {
      output: "out/twice",
      claim: { ttl: "4s", refreshEvery: "1s" },
      steps: [slowStep(4)],
    },
    "live-pickup": {
      output: "out/live-pickup",
      claim: { ttl: "10s", refreshEvery: "1s" },
      steps: [slowStep(3)],
    },
    "lost-record": {
      output: "out/lost-record",
      claim: { ttl: "10s", refreshEvery: "1s" },
      steps: [slowStep(2)],
    },
    "swept-pickup": {
      output: "out/swept-pickup",
      claim: { ttl: "30s", refreshEvery: "1s" },
      steps: [slowStep(3)],
    },
    "trimmed-pickup": {
      output: "out/trimmed-pickup",
      claim: { ttl: "30s", refreshEvery: "1s" },
      steps: [slowStep(3)],
    },
    "taken-pickup": {
      output: "out/taken-pickup",
      claim: { ttl: "10s", refreshEvery: "1s" },
      steps: [slowStep(3)],
    },
    "paused-publisher": {
      output: "out/paused-publisher",
      claim: { ttl: "30s", refreshEvery: "1s" },
      steps: [{ name: "write", run: ["sh", "-c", 'echo "$CLAIMWATCH_RUN_ID" > "$CLAIMWATCH_WORK/v"'] }],
    },
    "unseen-publisher": {
      output: "out/unseen-publisher",
      claim: { ttl: "30s", refreshEvery: "1s" },
      steps: [{ name: "write", run: ["sh", "-c", 'echo "$CLAIMWATCH_RUN_ID" > "$CLAIMWATCH_WORK/v"'] }],
    },
    "moved-on-publisher": {
      output: "out/moved-on-publisher",
      claim: { ttl: "30s", refreshEvery: "1s" },
      steps: [{ name: "write", run: ["sh", "-c", 'echo "$CLAIMWATCH_RUN_ID" > "$CLAIMWATCH_WORK/v"'] }],
    },
    "listed-publisher": {
      output: "out/listed-publisher",
      claim: { ttl: "30s", refreshEvery: "1s" },
      steps: [{ name: "write", run: ["sh", "-c", "true"] }],
    },
    "swept-publisher": {
      output: "out/swept-publisher",
      claim: { ttl: "30s", refreshEvery: "1s" },
      steps: [{ name: "write", run: ["sh", "-c", "true"] }],
    },
  });
  deps = rebuildDepsOf(bed);
});
after(() => bed.close());

const job = (id: string, rebuild: string, attempt: number, over: Partial<RebuildJob> = {}): RebuildJob => ({
  id,
  attempt,
  createdAt: Date.now(),
  data: { rebuild, version: "v1", trigger: "api" as const },
  signal: new AbortController().signal,
  ...over,
});
const claimOf = (rebuild: string) => claimName(bed.definitions.rebuilds.get(rebuild)!.claimPath);
const lockLost = { ownsLock: async () => false };
const lockHeld = { ownsLock: async () => true };

async function waitFor<T>(what: string, read: () => Promise<T | null | undefined | false>): Promise<T> {
  for (let i = 0; i < 400; i++) {
    const value = await read();
    if (value) return value;
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
  throw new Error(`timed out waiting for ${what}`);
}

test("an earlier attempt that lost its job lock finds a later one building: superseded, not retried, the later one untouched", async () => {
  // Attempt 2 (another worker) is building.
  const later = runRebuild(deps, job("order-a", "slow", 2));
  await waitFor(
    "attempt 2 to hold the claim",
    async () => (await readClaim(bed.claims, bed.keys, claimOf("slow")))?.holder.attempt === 2,
  );
  const token = (await readClaim(bed.claims, bed.keys, claimOf("slow")))!.token;

  // Attempt 1 comes back after losing its job lock.
  const error = await runRebuild(deps, job("order-a", "slow", 1, lockLost)).then(
    () => null,
    (e: unknown) => e,
  );
  assert.ok(error instanceof RebuildError, `attempt 1 threw ${String(error)}`);
  assert.equal(error.retry, false, "no retry: the later attempt carries the request on");
  assert.equal(error.ended, "superseded", "the worker logs it as superseded, not failed");
  const first = await readRun(bed.main, bed.keys, runIdOf("order-a", 1));
  assert.equal(first?.status, "superseded");
  assert.match(first?.reason ?? "", /later attempt of this job \(attempt 2/);
  assert.equal((await readClaim(bed.claims, bed.keys, claimOf("slow")))?.token, token, "attempt 2 keeps its claim");
  assert.equal(
    (await readRun(bed.main, bed.keys, runIdOf("order-a", 2)))?.status,
    "running",
    "its record is not closed",
  );

  assert.equal((await later).status, "rebuilt");
  assert.equal((await readRun(bed.main, bed.keys, runIdOf("order-a", 2)))?.status, "rebuilt");
});

test("a later attempt still takes over from an earlier one", async () => {
  const held = await acquireClaim(
    bed.claims,
    bed.keys,
    claimOf("ordered"),
    { jobId: "order-b", attempt: 2, runId: runIdOf("order-b", 2), workerId: "w-dead", version: "v1" },
    { ttlMs: 30_000, refreshEveryMs: 5_000 },
  );
  assert.equal(held.status, "acquired");
  const third = await runRebuild(deps, job("order-b", "ordered", 3));
  assert.equal(third.status, "rebuilt");
  assert.match((await readRun(bed.main, bed.keys, runIdOf("order-b", 3)))?.reason ?? "", /took over/);
});

test("an attempt holding its job lock is never failed for a holder numbered after it (the queue's Redis lost pickups): it defers", async () => {
  const name = claimOf("ordered");
  await bed.claims.del(bed.keys.claim(name), bed.keys.claimMeta(name));
  const held = await acquireClaim(
    bed.claims,
    bed.keys,
    name,
    { jobId: "order-c", attempt: 5, runId: runIdOf("order-c", 5), workerId: "w-stale", version: "v2" },
    { ttlMs: 30_000, refreshEveryMs: 5_000 },
  );
  assert.equal(held.status, "acquired");
  for (const [attempt, over] of [
    [2, lockHeld],
    [3, {}], // no lock check available: keep the request
  ] as const) {
    const outcome = await runRebuild(deps, {
      ...job("order-c", "ordered", attempt, over),
      data: { rebuild: "ordered", version: "v2", trigger: "api" },
    });
    assert.equal(outcome.status, "deferred", `attempt ${attempt}: ${JSON.stringify(outcome)}`);
    const record = await readRun(bed.main, bed.keys, runIdOf("order-c", attempt));
    assert.equal(record?.status, "deferred");
    assert.match(record?.reason ?? "", /request is kept/);
  }
});

test("an earlier attempt that took the name while it was free does not end the later one: it defers", async () => {
  const name = claimOf("slow");
  const later = runRebuild(deps, {
    ...job("order-d", "slow", 2, lockHeld),
    data: { rebuild: "slow", version: "v3", trigger: "api" },
  });
  await waitFor(
    "attempt 2 to hold the claim",
    async () => (await readClaim(bed.claims, bed.keys, name))?.holder.jobId === "order-d",
  );
  // The claims Redis forgets attempt 2's grant (restart from an older snapshot), and attempt 1,
  // still running somewhere, acquires the free name.
  await bed.claims.del(bed.keys.claim(name), bed.keys.claimMeta(name));
  const stale = await acquireClaim(
    bed.claims,
    bed.keys,
    name,
    { jobId: "order-d", attempt: 1, runId: runIdOf("order-d", 1), workerId: "w-stale", version: "v3" },
    { ttlMs: 30_000, refreshEveryMs: 5_000 },
  );
  assert.equal(stale.status, "acquired");
  const outcome = await later;
  assert.equal(outcome.status, "deferred", JSON.stringify(outcome));
  assert.equal((await readRun(bed.main, bed.keys, runIdOf("order-d", 2)))?.status, "deferred");
});

test("the same attempt picked up twice (the queue's Redis lost a pickup): the second takes the record and the claim over and builds in its own work dir; the first's writes are refused", async () => {
  const runId = runIdOf("order-twice", 1);
  const first = runRebuild(deps, job("order-twice", "twice", 1)).then(
    (outcome) => outcome.status,
    (error: unknown) => `threw: ${String(error)}`,
  );
  await waitFor(
    "the first pickup to hold the claim",
    async () => (await readClaim(bed.claims, bed.keys, claimOf("twice")))?.holder.runId === runId,
  );
  const begun = await readRun(bed.main, bed.keys, runId);
  assert.equal(begun?.status, "running");

  // The second pickup of attempt 1 (the queue gave it the job again; the first lost its job lock):
  // it takes the record over, then the claim (same job and attempt), and builds in its own work dir.
  const second = await runRebuild(deps, job("order-twice", "twice", 1, lockHeld));
  assert.equal(second.status, "rebuilt", JSON.stringify(second));
  assert.equal(await first, "deferred", "the first lost its claim to the second (its own outcome, unrecorded)");

  // The record is the second pickup's: its fence, its finished step, its build; nothing the first
  // wrote after the takeover (its aborted step, its deferral, its log lines).
  const record = await readRun(bed.main, bed.keys, runId);
  assert.equal(record?.status, "rebuilt");
  assert.equal(record?.fence, second.status === "rebuilt" ? second.fence : -1);
  assert.equal(record?.buildHash, second.status === "rebuilt" ? second.buildHash : "?");
  assert.deepEqual(
    record?.steps.map((step) => step.status),
    ["done"],
  );
  const log = await bed.main.lrange(bed.keys.runLog(runId), 0, -1);
  assert.ok(!log.some((line) => /aborting: SIGTERM/.test(line)), `none of the first's lines: ${log.join(" | ")}`);
  // The second's build is the output's; no work dir is left.
  const output = outputDirOf(bed.definitions.rebuilds.get("twice")!, undefined);
  assert.equal(fs.readlinkSync(path.join(output, "current")), path.join("builds", record?.buildHash ?? "?"));
  assert.deepEqual(fs.readdirSync(path.join(output, ".work")), []);
});

test("the same attempt picked up again after another pickup of it ended its record: this pickup builds nothing unrecorded; it defers without spending an attempt (the next pickup is a new attempt), or ends as done when that record says rebuilt", async () => {
  const runId = runIdOf("order-ended", 1);
  // An earlier pickup of attempt 1 ran and failed: its record is final (the queue's Redis then
  // lost that pickup and gave the job again, numbered the same).
  const store = { client: bed.main, keys: bed.keys, retention: deps.retention ?? DEFAULT_RETENTION };
  const identity = {
    ...runPlaceOf("ordered", undefined),
    runId,
    jobId: "order-ended",
    attempt: 1,
    previousRunId: null,
    rebuildName: "ordered",
    createdAt: Date.now(),
    trigger: "api" as const,
    workerId: "an-earlier-worker",
    host: "h",
  };
  const earlier = await beginAttempt(store, identity, { mode: { kind: "running" } });
  assert.equal(
    await writeRun(store, identity, { status: "failed", fields: { reason: "exit 3" }, owner: earlier.beginId }),
    "written",
  );

  const output = outputDirOf(bed.definitions.rebuilds.get("ordered")!, undefined);
  const publishedBefore = fs.existsSync(path.join(output, "current"))
    ? fs.readlinkSync(path.join(output, "current"))
    : null;
  const outcome = await runRebuild(deps, job("order-ended", "ordered", 1, lockHeld));
  assert.equal(
    outcome.status,
    "deferred",
    `it still holds the job: the request is kept, no attempt spent: ${JSON.stringify(outcome)}`,
  );
  const publishedAfter = fs.existsSync(path.join(output, "current"))
    ? fs.readlinkSync(path.join(output, "current"))
    : null;
  assert.equal(publishedAfter, publishedBefore, "nothing published by an unrecorded pickup");
  const record = await readRun(bed.main, bed.keys, runId);
  assert.equal(record?.status, "failed", "the record says what the earlier pickup did");
  assert.equal(record?.workerId, "an-earlier-worker");

  // That pickup rebuilt it: the job is done (a skip), not failed nor run again.
  const rebuiltId = runIdOf("order-ended-rebuilt", 1);
  const rebuiltBy = { ...identity, runId: rebuiltId, jobId: "order-ended-rebuilt" };
  const earlierRebuilt = await beginAttempt(store, rebuiltBy, { mode: { kind: "running" } });
  assert.equal(
    await writeRun(store, rebuiltBy, { status: "rebuilt", fields: { fence: 1 }, owner: earlierRebuilt.beginId }),
    "written",
  );
  const done = await runRebuild(deps, job("order-ended-rebuilt", "ordered", 1, lockHeld));
  assert.equal(done.status, "skipped", JSON.stringify(done));
  assert.equal((await readRun(bed.main, bed.keys, rebuiltId))?.status, "rebuilt");

  // A pickup that lost its job lock only stops (the job is another pickup's).
  const stale = await runRebuild(deps, job("order-ended", "ordered", 1, lockLost)).then(
    (o) => o,
    (e: unknown) => e,
  );
  assert.ok(stale instanceof RebuildError && !stale.retry, `stops, not retried: ${String(stale)}`);
});

test("an operator's cancel reaching a pickup whose record another pickup took over writes nothing on it (that pickup's own cancel watch ends it): the stale pickup ends cancelled", async () => {
  const runId = runIdOf("order-cancel", 1);
  const controller = new AbortController();
  const stale = runRebuild(deps, {
    ...job("order-cancel", "cancel-twice", 1),
    signal: controller.signal,
    cancelRequest: () => ({ actor: "ops", reason: "wrong input", at: Date.now() }),
  }).then(
    (outcome) => outcome,
    (error: unknown) => error,
  );
  await waitFor("the stale pickup's step to run", async () =>
    (await readRun(bed.main, bed.keys, runId))?.steps.some((step) => step.status === "running"),
  );
  // Another pickup of the same attempt takes the record over (it has not reached its steps yet).
  const store = { client: bed.main, keys: bed.keys, retention: deps.retention ?? DEFAULT_RETENTION };
  const taken = await beginAttempt(
    store,
    {
      ...runPlaceOf("cancel-twice", undefined),
      runId,
      jobId: "order-cancel",
      attempt: 1,
      previousRunId: null,
      rebuildName: "cancel-twice",
      createdAt: Date.now(),
      trigger: "api",
      workerId: "the-second-pickup",
      host: "h",
    },
    { mode: { kind: "running" } },
  );
  assert.equal(taken.status, "began");
  controller.abort(CANCEL_ABORT_REASON);
  const outcome = await stale;
  assert.equal((outcome as { status?: string }).status, "cancelled", JSON.stringify(outcome));

  // A write on the job's behalf could land between the owner's last cancel check and its
  // publish, calling a published build cancelled: the owner ends its record itself.
  const record = await readRun(bed.main, bed.keys, runId);
  assert.equal(record?.status, "running", "left to the pickup that has it");
  assert.equal(record?.workerId, "the-second-pickup");
  assert.deepEqual(record?.steps, [], "none of the stale pickup's steps");
  assert.equal(record?.fence ?? null, null, "nor its fence");
});

test("a live pickup's record is not taken over by a stale pickup of the same attempt (its begin, or its begin in a final mode): the live one's record says what it built", async () => {
  const runId = runIdOf("order-live", 1);
  // The live pickup's worker beats (the worker process writes this on its heartbeat).
  await bed.main.set(bed.keys.workerHeartbeat(deps.worker.id), "1", "PX", 60_000);
  try {
    const live = runRebuild(deps, job("order-live", "live-pickup", 1, lockHeld));
    await waitFor("the live pickup's step to run", async () =>
      (await readRun(bed.main, bed.keys, runId))?.steps.some((step) => step.status === "running"),
    );
    // A stale pickup of the same attempt (its job lock lost, the queue's Redis forgot it) ends
    // where it begins: e.g. stopped while its inputs were read.
    const store = { client: bed.main, keys: bed.keys, retention: deps.retention ?? DEFAULT_RETENTION };
    const staleIdentity = {
      ...runPlaceOf("live-pickup", undefined),
      runId,
      jobId: "order-live",
      attempt: 1,
      previousRunId: null,
      rebuildName: "live-pickup",
      createdAt: Date.now(),
      trigger: "api" as const,
      workerId: "a-stale-pickup",
      host: "h",
    };
    const ended = await beginAttempt(store, staleIdentity, {
      mode: { kind: "final", status: "aborted", reason: "job lock lost while its inputs were read" },
    });
    assert.equal(ended.status, "exists", "the live pickup's record is left alone");
    const begun = await beginAttempt(store, staleIdentity, { mode: { kind: "running" } });
    assert.equal(begun.status, "exists");

    const outcome = await live;
    assert.equal(outcome.status, "rebuilt", JSON.stringify(outcome));
    const record = await readRun(bed.main, bed.keys, runId);
    assert.equal(record?.status, "rebuilt", "the record says what was built");
    assert.equal(record?.workerId, deps.worker.id);
    assert.equal(record?.buildHash, outcome.status === "rebuilt" ? outcome.buildHash : "?");
  } finally {
    await bed.main.del(bed.keys.workerHeartbeat(deps.worker.id));
  }
});

test("a pickup whose record another pickup took over while it ran (its worker stopped beating) does not publish: it defers, the request is kept, the output is not moved", async () => {
  const runId = runIdOf("order-taken", 1);
  const output = outputDirOf(bed.definitions.rebuilds.get("taken-pickup")!, undefined);
  const paused = runRebuild(deps, job("order-taken", "taken-pickup", 1, lockHeld));
  await waitFor("the first pickup's step to run", async () =>
    (await readRun(bed.main, bed.keys, runId))?.steps.some((step) => step.status === "running"),
  );
  // No heartbeat of the first pickup's worker (as after a pause past it): a second pickup of the
  // same attempt takes the record over.
  const store = { client: bed.main, keys: bed.keys, retention: deps.retention ?? DEFAULT_RETENTION };
  const taken = await beginAttempt(
    store,
    {
      ...runPlaceOf("taken-pickup", undefined),
      runId,
      jobId: "order-taken",
      attempt: 1,
      previousRunId: null,
      rebuildName: "taken-pickup",
      createdAt: Date.now(),
      trigger: "api",
      workerId: "the-second-pickup",
      host: "h",
    },
    { mode: { kind: "running" } },
  );
  assert.equal(taken.status, "began");
  const outcome = await paused;
  assert.equal(outcome.status, "deferred", `not published, the request kept: ${JSON.stringify(outcome)}`);
  assert.match(
    outcome.status === "deferred" ? (outcome.note ?? "") : "",
    /taken over by another pickup/,
    "no record of its own says why: the outcome carries the note for the queue view",
  );
  assert.equal(fs.existsSync(path.join(output, "current")), false, "nothing published");
  const record = await readRun(bed.main, bed.keys, runId);
  assert.equal(record?.status, "running", "the second pickup's, untouched");
  assert.equal(record?.workerId, "the-second-pickup");
  assert.equal(record?.buildHash ?? null, null);
  assert.equal(
    await bed.main.get(bed.keys.idempotency(idempotencyKey("taken-pickup", undefined, "v1"))),
    null,
    "the version is not marked rebuilt",
  );
});

test("an attempt whose record Redis lost while it ran (a restart from an older snapshot) writes it again at its end: the history names its build", async () => {
  const runId = runIdOf("order-lost", 1);
  const running = runRebuild(deps, job("order-lost", "lost-record", 1, lockHeld));
  await waitFor("the step to run", async () =>
    (await readRun(bed.main, bed.keys, runId))?.steps.some((step) => step.status === "running"),
  );
  await bed.main.del(bed.keys.run(runId));
  const outcome = await running;
  assert.equal(outcome.status, "rebuilt", JSON.stringify(outcome));
  const record = await readRun(bed.main, bed.keys, runId);
  assert.equal(record?.status, "rebuilt", "recorded again");
  assert.equal(record?.buildHash, outcome.status === "rebuilt" ? outcome.buildHash : "?");
  assert.equal(record?.fence, outcome.status === "rebuilt" ? outcome.fence : -1);
  assert.equal(record?.version, "v1");
  assert.match(record?.reason ?? "", /record was lost after it began/);
  assert.deepEqual(
    record?.steps.map((step) => step.status),
    ["done"],
  );
});

/**
 * A holder runs its step while its worker is taken for dead: another worker's sweep closes its
 * record as aborted (no heartbeat of its worker), then `afterSweep`; the holder then wakes.
 */
async function sweptWhileRunning(jobId: string, rebuild: string, afterSweep = async () => {}) {
  const runId = runIdOf(jobId, 1);
  const output = outputDirOf(bed.definitions.rebuilds.get(rebuild)!, undefined);
  const paused = runRebuild(deps, job(jobId, rebuild, 1, lockHeld));
  await waitFor("the step to run", async () =>
    (await readRun(bed.main, bed.keys, runId))?.steps.some((step) => step.status === "running"),
  );
  const store = { client: bed.main, keys: bed.keys, retention: deps.retention ?? DEFAULT_RETENTION };
  assert.ok((await closeAbandonedRuns(store)).includes(runId), "the sweep closed it");
  await afterSweep();
  return { runId, output, outcome: await paused };
}

test("a holder whose record the sweep closed while it ran (its worker stopped beating: paused past its heartbeat, its claim's TTL longer) publishes nothing on waking: it defers", async () => {
  const { runId, output, outcome } = await sweptWhileRunning("order-swept", "swept-pickup");
  assert.equal(outcome.status, "deferred", `not published, the request kept: ${JSON.stringify(outcome)}`);
  assert.equal(fs.existsSync(path.join(output, "current")), false, "nothing published");
  const record = await readRun(bed.main, bed.keys, runId);
  assert.equal(record?.status, "aborted", "the record says what happened: nothing built");
  assert.equal(record?.buildHash ?? null, null);
});

test("a holder whose record the sweep closed and trimming then removed (many newer runs) still publishes nothing on waking: a lately aborted record's hash is kept (unlisted)", async () => {
  // Count retention of 0 for this rebuild: every final record is trimmed, but not a lately aborted one.
  const trim = async () =>
    void (await trimRuns(bed.main, bed.keys, {
      rebuild: "trimmed-pickup",
      tenant: null,
      retention: { maxPerRebuild: 0, maxAgeMs: DEFAULT_RETENTION.maxAgeMs },
    }));
  const { runId, output, outcome } = await sweptWhileRunning("order-trimmed", "trimmed-pickup", trim);
  assert.equal(outcome.status, "deferred", `not published, the request kept: ${JSON.stringify(outcome)}`);
  assert.equal(fs.existsSync(path.join(output, "current")), false, "nothing published");
  assert.equal((await readRun(bed.main, bed.keys, runId))?.status, "aborted", "kept by trimming, as the sweep left it");
  const listed = await listRuns(bed.main, bed.keys, { rebuild: "trimmed-pickup" }, 10);
  assert.deepEqual(listed.runs, [], "but no longer listed: the count is 0");
});

/**
 * Claims whose fenced publish, once answered, waits for `release`: the pickup is "paused" right
 * after its publish, before its final record (what the soak's SIGSTOP hit).
 */
function claimsPausedAfterPublish() {
  let published!: () => void;
  let release!: () => void;
  const publishedNow = new Promise<void>((resolve) => (published = resolve));
  const released = new Promise<void>((resolve) => (release = resolve));
  const claims = new Proxy(bed.claims, {
    get(target, prop) {
      const value = Reflect.get(target, prop, target) as unknown;
      if (typeof value !== "function") return value;
      const bound = (value as (...args: unknown[]) => unknown).bind(target);
      if (prop !== "claimwatchFencedPublish") return bound;
      return async (...args: unknown[]) => {
        const reply = await bound(...args);
        published();
        await released;
        return reply;
      };
    },
  });
  return { claims, publishedNow, release };
}

/** The job's next attempt begins (BullMQ redelivered the job: the first pickup lost its job lock). */
async function nextAttemptBegins(jobId: string, rebuild: string) {
  const store = { client: bed.main, keys: bed.keys, retention: deps.retention ?? DEFAULT_RETENTION };
  return beginAttempt(
    store,
    {
      ...runPlaceOf(rebuild, undefined),
      runId: runIdOf(jobId, 2),
      jobId,
      attempt: 2,
      previousRunId: runIdOf(jobId, 1),
      rebuildName: rebuild,
      createdAt: Date.now(),
      trigger: "api",
      workerId: "the-next-attempts-worker",
      host: "h",
    },
    { mode: { kind: "running" } },
  );
}

test("an attempt paused between its publish and its final record while its worker beats is not called aborted by the next attempt, the sweep or a stray close: it ends rebuilt, naming its build", async () => {
  const jobId = "order-paused-publish";
  const runId = runIdOf(jobId, 1);
  await bed.main.set(bed.keys.workerHeartbeat(deps.worker.id), "1", "PX", 60_000);
  const gated = claimsPausedAfterPublish();
  try {
    const first = runRebuild({ ...deps, claims: gated.claims }, job(jobId, "paused-publisher", 1, lockHeld));
    await Promise.race([
      gated.publishedNow,
      first.then((outcome) => assert.fail(`ended before its publish: ${JSON.stringify(outcome)}`)),
    ]);
    assert.equal((await nextAttemptBegins(jobId, "paused-publisher")).status, "began");
    const store = { client: bed.main, keys: bed.keys, retention: deps.retention ?? DEFAULT_RETENTION };
    assert.ok(!(await closeAbandonedRuns(store)).includes(runId), "the sweep leaves it (its worker beats)");
    const place = { ...runPlaceOf("paused-publisher", undefined), runId, jobId };
    assert.equal(await abandonRun(store, place, "a stray close"), false, "a close whatever its worker leaves it too");
    assert.equal(
      (await readRun(bed.main, bed.keys, runId))?.status,
      "running",
      "not called aborted while it may have published",
    );
    gated.release();
    const outcome = await first;
    assert.equal(outcome.status, "rebuilt", JSON.stringify(outcome));
    const record = await readRun(bed.main, bed.keys, runId);
    assert.equal(record?.status, "rebuilt", "the history says what happened");
    assert.equal(record?.buildHash, outcome.status === "rebuilt" ? outcome.buildHash : "?");
  } finally {
    gated.release();
    await bed.main.del(bed.keys.workerHeartbeat(deps.worker.id));
  }
});

test("an attempt that stopped beating after its check before the publish is closed by the next attempt, its reason saying the build may be published", async () => {
  const jobId = "order-dead-publisher";
  const runId = runIdOf(jobId, 1);
  // No heartbeat of its worker: it died (or stopped) after the publish.
  const gated = claimsPausedAfterPublish();
  try {
    const first = runRebuild(
      { ...deps, claims: gated.claims },
      job(jobId, "paused-publisher", 1, {
        ...lockHeld,
        // Another version than the test before's, which is rebuilt already.
        data: { rebuild: "paused-publisher", version: "v2", trigger: "api" as const },
      }),
    ).catch((error: unknown) => error);
    await Promise.race([
      gated.publishedNow,
      first.then((outcome) => assert.fail(`ended before its publish: ${JSON.stringify(outcome)}`)),
    ]);
    assert.equal((await nextAttemptBegins(jobId, "paused-publisher")).status, "began");
    const record = await readRun(bed.main, bed.keys, runId);
    assert.equal(record?.status, "aborted");
    assert.match(
      record?.reason ?? "",
      /its worker had stopped beating after it passed its check before publishing build [0-9a-f]{32} \(fence \d+\): that build may be published/,
    );
    gated.release();
    await first;
  } finally {
    gated.release();
  }
});

/** A marked record's check before its publish, moved `ms` into the past on the Redis clock. */
async function checkedAgo(runId: string, ms: number): Promise<void> {
  const [seconds] = await bed.main.time();
  await bed.main.hset(bed.keys.run(runId), "publishingAt", String(Number(seconds) * 1000 - ms));
}

/** A sweeping worker's own heartbeat: a streak of a whole TTL, its last beat a second ago (BEAT_STREAK). */
async function sweeperBeats(workerId: string): Promise<void> {
  const now = await serverNow(bed.main);
  await bed.main.hset(bed.keys.workerHeartbeat(workerId), {
    id: workerId,
    heartbeatAt: now - 1_000,
    beatStreakSince: now - 2 * HEARTBEAT_TTL_MS,
  });
}

/** The first attempt of `jobId` begun on `workerId`, past its check before a publish (the marker written). */
async function markedFirstAttempt(
  jobId: string,
  workerId: string,
  rebuild = "paused-publisher",
  mark = `7 ${"ab".repeat(16)}`,
) {
  const store = { client: bed.main, keys: bed.keys, retention: deps.retention ?? DEFAULT_RETENTION };
  const identity = {
    ...runPlaceOf(rebuild, undefined),
    runId: runIdOf(jobId, 1),
    jobId,
    attempt: 1,
    previousRunId: null,
    rebuildName: rebuild,
    createdAt: Date.now(),
    trigger: "api" as const,
    workerId,
    host: "h",
  };
  const begun = await beginAttempt(store, identity, { mode: { kind: "running" } });
  assert.equal(begun.status, "began");
  const marked = await writeRun(store, identity, {
    fields: { publishing: mark },
    owner: begun.beginId,
  });
  assert.equal(marked, "written");
  return { store, identity };
}

test("a record past its check before a publish is left to its attempt only so long: one stuck there past the limit is closed, its reason naming the build", async () => {
  const jobId = "order-stuck-publisher";
  const { identity } = await markedFirstAttempt(jobId, "stuck-worker");
  await bed.main.set(bed.keys.workerHeartbeat("stuck-worker"), "1", "PX", 60_000);
  try {
    // Its check three minutes ago on the Redis clock (a hung disk since): past the limit.
    await checkedAgo(identity.runId, 180_000);
    assert.equal((await nextAttemptBegins(jobId, "paused-publisher")).status, "began");
    const record = await readRun(bed.main, bed.keys, identity.runId);
    assert.equal(record?.status, "aborted");
    assert.match(
      record?.reason ?? "",
      /it had passed its check before publishing build (ab){16} \(fence 7\) and did not end its record: that build may be published/,
    );
  } finally {
    await bed.main.del(bed.keys.workerHeartbeat("stuck-worker"));
  }
});

test("a record past its check before a publish is not taken over by another pickup of the same attempt (the takeover would drop what it may have published): the sweep closes it, naming the build", async () => {
  const jobId = "order-marked-takeover";
  const { store, identity } = await markedFirstAttempt(jobId, "gone-worker"); // no heartbeat: it stopped beating
  const again = await beginAttempt(store, { ...identity, workerId: "second-pickup" }, { mode: { kind: "running" } });
  assert.equal(again.status, "exists", "not taken over");
  assert.ok((await closeAbandonedRuns(store)).includes(identity.runId), "the sweep closes it");
  const record = await readRun(bed.main, bed.keys, identity.runId);
  assert.equal(record?.status, "aborted");
  assert.equal(record?.workerId, "gone-worker");
  assert.match(
    record?.reason ?? "",
    /its worker had stopped beating after it passed its check before publishing build (ab){16} \(fence 7\)/,
  );
});

test("an attempt that published, its worker gone before its final record was written, is closed rebuilt by the job's next attempt: the claims Redis's pointer names its publish", async () => {
  const jobId = "order-unseen-publish";
  const runId = runIdOf(jobId, 1);
  // No heartbeat of its worker: it stopped (a deploy) after the publish, its final write refused.
  const gated = claimsPausedAfterPublish();
  try {
    const first = runRebuild({ ...deps, claims: gated.claims }, job(jobId, "unseen-publisher", 1, lockHeld)).catch(
      (error: unknown) => error,
    );
    await Promise.race([
      gated.publishedNow,
      first.then((outcome) => assert.fail(`ended before its publish: ${JSON.stringify(outcome)}`)),
    ]);
    const pointer = await bed.claims.hgetall(bed.keys.published(claimOf("unseen-publisher")));
    assert.equal(pointer.runId, runId, "the claims Redis names the run");
    // Another version was the lane's mark before this publish (its final write never came).
    await bed.main.set(bed.keys.idempotency("another-version"), "an-earlier-run");
    await bed.main.hset(
      bed.keys.rebuiltNow(claimName(bed.definitions.rebuilds.get("unseen-publisher")!.claimPath)),
      "key",
      bed.keys.idempotency("another-version"),
    );
    // The next attempt: cancelled before it starts (it ends at its first record), which closes the previous one.
    const controller = new AbortController();
    controller.abort(CANCEL_ABORT_REASON);
    const next = await runRebuild(
      deps,
      job(jobId, "unseen-publisher", 2, { ...lockHeld, signal: controller.signal, cancelRequest: () => null }),
    );
    assert.equal(next.status, "cancelled");
    const record = await readRun(bed.main, bed.keys, runId);
    assert.equal(record?.status, "rebuilt", `the history says it published: ${record?.reason}`);
    assert.equal(record?.fence, Number(pointer.fence));
    assert.equal(record?.buildHash, pointer.value);
    assert.match(
      record?.reason ?? "",
      new RegExp(
        `^published build ${pointer.value} \\(fence ${pointer.fence}; the claims Redis recorded this run as its publisher\\), but its final record was never written .*closed when worker died or stalled .*attempt 2$`,
      ),
    );
    assert.ok(!(record?.steps ?? []).some((step) => step.status === "running"), "no step left running");
    // Its fence is the lane's (a late final write of an older publish cannot mark that version over
    // it), and another version's mark is dropped; its own version is not marked (review helper-118:
    // the proof may be older than a publish of another version whose final write has not landed).
    assert.ok(record?.idempotencyKey, "its version has an idempotency key");
    assert.equal(await bed.main.get(bed.keys.idempotency(record.idempotencyKey)), null, "not marked by the close");
    assert.deepEqual(
      await bed.main.hmget(
        bed.keys.rebuiltNow(claimName(bed.definitions.rebuilds.get("unseen-publisher")!.claimPath)),
        "fence",
        "key",
      ),
      [pointer.fence, null],
    );
    assert.equal(await bed.main.get(bed.keys.idempotency("another-version")), null, "another version unmarked");
    gated.release();
    await first;
    assert.equal((await readRun(bed.main, bed.keys, runId))?.status, "rebuilt", "its own late write changes nothing");
  } finally {
    gated.release();
  }
});

test("an attempt that published, its worker gone before its final record was written, is closed rebuilt though another run published a newer fence since: the claims Redis's list of publishes names it (the Sentinel soak's unrecorded publish)", async () => {
  const jobId = "order-moved-on-publish";
  const runId = runIdOf(jobId, 1);
  const name = claimOf("moved-on-publisher");
  const outputDir = outputDirOf(bed.definitions.rebuilds.get("moved-on-publisher")!, undefined);
  const gated = claimsPausedAfterPublish();
  try {
    const first = runRebuild({ ...deps, claims: gated.claims }, job(jobId, "moved-on-publisher", 1, lockHeld)).catch(
      (error: unknown) => error,
    );
    await Promise.race([
      gated.publishedNow,
      first.then((outcome) => assert.fail(`ended before its publish: ${JSON.stringify(outcome)}`)),
    ]);
    const its = await bed.claims.hgetall(bed.keys.published(name));
    assert.equal(its.runId, runId, "the claims Redis named the run");
    // It stood still after its publish (SIGSTOP) past its claim's TTL; another run took the name,
    // published a newer build and recorded its fence. The pointer no longer names the first run.
    await bed.claims.del(bed.keys.claim(name));
    const newer = await acquireClaim(
      bed.claims,
      bed.keys,
      name,
      { jobId: "someone-else", attempt: 1, runId: runIdOf("someone-else", 1), workerId: "w-other", version: "v2" },
      { ttlMs: 30_000, refreshEveryMs: 5_000 },
    );
    assert.equal(newer.status, "acquired");
    if (newer.status !== "acquired") return;
    const newerBuild = "cd".repeat(16);
    fs.mkdirSync(path.join(outputDir, "builds", newerBuild), { recursive: true });
    const publish = await publishFenced(bed.claims, bed.keys, {
      name,
      fence: newer.fence,
      token: newer.token,
      value: newerBuild,
      runId: runIdOf("someone-else", 1),
      listed: `${runIdOf("someone-else", 1)} v2 -`,
    });
    assert.equal(publish.status, "published");
    assert.equal((await recordPublishedFence(outputDir, newer.fence, newerBuild)).status, "recorded");
    await pointCurrentAtRecord(outputDir, newer.fence, newerBuild);
    // As the newer run's own final write leaves the lane: its fence seen.
    await bed.main.hset(
      bed.keys.rebuiltNow(claimName(bed.definitions.rebuilds.get("moved-on-publisher")!.claimPath)),
      "fence",
      newer.fence,
    );
    // The job's next attempt (cancelled before it starts) closes the first one's record.
    const controller = new AbortController();
    controller.abort(CANCEL_ABORT_REASON);
    const next = await runRebuild(
      deps,
      job(jobId, "moved-on-publisher", 2, { ...lockHeld, signal: controller.signal, cancelRequest: () => null }),
    );
    assert.equal(next.status, "cancelled");
    const record = await readRun(bed.main, bed.keys, runId);
    assert.equal(record?.status, "rebuilt", `the history says it published: ${record?.reason}`);
    assert.equal(record?.fence, Number(its.fence));
    assert.equal(record?.buildHash, its.value);
    assert.match(record?.reason ?? "", new RegExp(`^published build ${its.value} \\(fence ${its.fence};`));
    assert.equal(record?.finishedAt, Number(its.publishedAt), "it finished when it published");
    // The lane keeps the newer fence (a close of an older publish does not move it back).
    const lane = bed.keys.rebuiltNow(claimName(bed.definitions.rebuilds.get("moved-on-publisher")!.claimPath));
    assert.equal(await bed.main.hget(lane, "fence"), String(newer.fence));
    gated.release();
    await first;
    assert.equal((await readRun(bed.main, bed.keys, runId))?.status, "rebuilt", "its own late write changes nothing");
    // Nor does it mark its version rebuilt: the output serves the newer build.
    assert.equal(await bed.main.hget(lane, "fence"), String(newer.fence));
    assert.ok(record?.idempotencyKey, "its version has an idempotency key");
    assert.equal(await bed.main.get(bed.keys.idempotency(record.idempotencyKey)), null, "its version is not marked");
    assert.equal(
      fs.readlinkSync(path.join(outputDir, "current")).endsWith(newerBuild),
      true,
      "current stays at the newer build",
    );
  } finally {
    gated.release();
    await bed.claims.del(bed.keys.claim(name));
  }
});

test("the sweep closes a dead worker's record that was about to publish rebuilt only when the claims Redis's pointer names that run, fence and build and the output's fence record does not contradict it; otherwise aborted, saying the build may be published", async () => {
  const [b, c, e] = ["ab".repeat(16), "cd".repeat(16), "ef".repeat(16)];
  const name = claimOf("swept-publisher");
  const outputDir = outputDirOf(bed.definitions.rebuilds.get("swept-publisher")!, undefined);
  // This machine holds builds b and c (promoted before their publish), not e.
  for (const hash of [b, c]) fs.mkdirSync(path.join(outputDir, "builds", hash), { recursive: true });
  await sweeperBeats("sweeper");
  const sweeper = {
    workerId: "sweeper",
    activeJobIds: () => [],
    judgesOthers: true,
    publishedBy: (run: { runId: string; rebuild: string | null; tenant: string | null }) =>
      publishedByRun({ claims: bed.claims, keys: bed.keys, definitions: bed.definitions }, run),
  };
  // In order: the output's fence record only goes up (fence 7 = b, then 8 = b).
  const cases = [
    // Its publish, its fence not recorded yet (the worker stopped before): repair records it.
    { jobId: "swept-unrecorded", mark: [6, b], pointer: [6, b, "named"], record: null, status: "rebuilt" },
    { jobId: "swept-named", mark: [7, b], pointer: [7, b, "named"], record: [7, b], status: "rebuilt" },
    { jobId: "swept-other-run", mark: [7, b], pointer: [7, b, "another"], record: null, status: "aborted" },
    { jobId: "swept-other-mark", mark: [7, c], pointer: [7, b, "named"], record: null, status: "aborted" },
    // The claims Redis granted fence 8 twice: the disk recorded b first, this run published c.
    { jobId: "swept-granted-twice", mark: [8, c], pointer: [8, c, "named"], record: [8, b], status: "aborted" },
    // The disk recorded fence 8 already: the claims Redis lost it and granted 7 again.
    { jobId: "swept-behind", mark: [7, c], pointer: [7, c, "named"], record: null, status: "aborted" },
    // A build this machine does not hold: nothing here can prove (or record) the publish.
    { jobId: "swept-not-held", mark: [9, e], pointer: [9, e, "named"], record: null, status: "aborted" },
  ] as const;
  try {
    for (const { jobId, mark, pointer, record: fenceRecord, status } of cases) {
      const { store, identity } = await markedFirstAttempt(
        jobId,
        "gone-publisher",
        "swept-publisher",
        `${mark[0]} ${mark[1]}`,
      );
      if (fenceRecord) await recordPublishedFence(outputDir, fenceRecord[0], fenceRecord[1]);
      const versionKey = bed.keys.idempotency(`version-of-${jobId}`);
      await bed.main.hset(bed.keys.run(identity.runId), "idempotencyKey", `version-of-${jobId}`);
      // Another version is the lane's mark: a proven close drops it.
      const otherKey = bed.keys.idempotency(`other-than-${jobId}`);
      await bed.main.set(otherKey, "an-earlier-run");
      await bed.main.hset(
        bed.keys.rebuiltNow(claimName(bed.definitions.rebuilds.get("swept-publisher")!.claimPath)),
        "key",
        otherKey,
      );
      const publishedAt = await serverNow(bed.main); // after its start, before the close
      const publisher = pointer[2] === "named" ? identity.runId : runIdOf("someone-else", 1);
      await bed.claims.hset(bed.keys.published(name), {
        fence: pointer[0],
        value: pointer[1],
        runId: publisher,
        publishedAt,
      });
      // As the publish pushes it beside the pointer (FENCED_PUBLISH): the closer lists the run on disk from it.
      await bed.claims.lpush(
        bed.keys.publishedRuns(name),
        `${publisher} v-${jobId} - ${pointer[0]} ${pointer[1]} ${publishedAt}`,
      );
      assert.ok((await closeAbandonedRuns(store, sweeper)).includes(identity.runId), `${jobId}: closed`);
      const record = await readRun(bed.main, bed.keys, identity.runId);
      assert.equal(record?.status, status, `${jobId}: ${record?.reason}`);
      if (status === "rebuilt") {
        assert.equal(record?.fence, mark[0]);
        assert.equal(record?.buildHash, mark[1]);
        assert.match(
          record?.reason ?? "",
          new RegExp(
            `^published build ${mark[1]} \\(fence ${mark[0]}; the claims Redis recorded this run as its publisher\\)`,
          ),
        );
        assert.equal(record?.finishedAt, publishedAt, "it finished when it published");
        assert.equal(record?.durationMs, publishedAt - (record?.startedAt ?? 0));
        const recorded = await readPublishedFence(outputDir);
        assert.ok(recorded && recorded.fence >= mark[0], "the fence is on disk (recorded by the closer if need be)");
        // And its run listed there (review helper-165): its job ends on this record.
        assert.ok(
          (await readPublishedJobs(outputDir)).some((run) => run.runId === identity.runId),
          `${jobId}: listed beside the output`,
        );
        assert.notEqual(await bed.main.zscore(bed.keys.runIndex({ status: "rebuilt" }), identity.runId), null);
        // Its fence is the lane's, another version's mark is dropped, its own is not set.
        assert.deepEqual(
          await bed.main.hmget(
            bed.keys.rebuiltNow(claimName(bed.definitions.rebuilds.get("swept-publisher")!.claimPath)),
            "fence",
            "key",
          ),
          [String(mark[0]), null],
        );
        assert.equal(await bed.main.get(otherKey), null, `${jobId}: another version unmarked`);
      } else {
        assert.match(record?.reason ?? "", /that build may be published/);
        assert.equal(await bed.main.get(otherKey), "an-earlier-run", `${jobId}: the lane untouched`);
        assert.equal((await bed.main.zscore(bed.keys.runIndex({ status: "aborted" }), identity.runId)) !== null, true);
      }
      assert.equal(await bed.main.zscore(bed.keys.runIndex({ status: "running" }), identity.runId), null);
      assert.equal(await bed.main.get(versionKey), null, `${jobId}: its version not marked by the close`);
    }
  } finally {
    await bed.claims.del(bed.keys.published(name));
    await bed.main.del(
      bed.keys.workerHeartbeat("sweeper"),
      bed.keys.rebuiltNow(claimName(bed.definitions.rebuilds.get("swept-publisher")!.claimPath)),
    );
  }
});

test("the sweep proves a dead worker's publish the pointer no longer names from the claims Redis's list once the output's fence record is past it; left running while that record is lower; aborted when the record holds its fence with another build", async () => {
  const b = "ab".repeat(16);
  const outputDir = outputDirOf(bed.definitions.rebuilds.get("listed-publisher")!, undefined);
  fs.mkdirSync(path.join(outputDir, "builds", b), { recursive: true });
  const name = claimOf("listed-publisher");
  await sweeperBeats("sweeper");
  const sweeper = {
    workerId: "sweeper",
    activeJobIds: () => [],
    judgesOthers: true,
    publishedBy: (run: { runId: string; rebuild: string | null; tenant: string | null }) =>
      publishedByRun({ claims: bed.claims, keys: bed.keys, definitions: bed.definitions }, run),
  };
  /** A real grant and fenced publish of `build` by `runId` (pushed on the list), the claim then gone. */
  const grantAndPublish = async (runId: string, build: string) => {
    await bed.claims.del(bed.keys.claim(name));
    const held = await acquireClaim(
      bed.claims,
      bed.keys,
      name,
      { runId, workerId: "gone-publisher", version: "v1" },
      { ttlMs: 30_000, refreshEveryMs: 5_000 },
    );
    assert.equal(held.status, "acquired");
    if (held.status !== "acquired") throw new Error("not acquired");
    const published = await publishFenced(bed.claims, bed.keys, {
      name,
      fence: held.fence,
      token: held.token,
      value: build,
      runId,
      listed: `${runId} v1 -`,
    });
    assert.equal(published.status, "published");
    await bed.claims.del(bed.keys.claim(name));
    return held.fence;
  };
  try {
    // An earlier publish, recorded on disk: the record stays below the run's fence until the newer one's.
    const earlier = await grantAndPublish(runIdOf("someone-earlier", 1), "ef".repeat(16));
    await recordPublishedFence(outputDir, earlier, "ef".repeat(16));
    // Published, then a newer fence published whose fence record is not on disk yet: unknown, left running.
    const { store, identity } = await markedFirstAttempt("listed-a", "gone-publisher", "listed-publisher", "0 -");
    const fence = await grantAndPublish(identity.runId, b);
    await bed.main.hset(bed.keys.run(identity.runId), "publishing", `${fence} ${b}`);
    const newer = await grantAndPublish(runIdOf("someone-newer", 1), "cd".repeat(16));
    assert.deepEqual(await closeAbandonedRuns(store, sweeper), [], "left for a later sweep");
    assert.equal((await readRun(bed.main, bed.keys, identity.runId))?.status, "running");
    // The newer publish's fence is recorded: the run's publish is proven, then replaced.
    await recordPublishedFence(outputDir, newer, "cd".repeat(16));
    assert.deepEqual(await closeAbandonedRuns(store, sweeper), [identity.runId]);
    const record = await readRun(bed.main, bed.keys, identity.runId);
    assert.equal(record?.status, "rebuilt", record?.reason ?? undefined);
    assert.equal(record?.fence, fence);
    assert.equal(record?.buildHash, b);

    // The list names a publish of fence F with build b, but the disk recorded F with another build
    // (the claims Redis granted F twice): not proven.
    const twice = await markedFirstAttempt("listed-b", "gone-publisher", "listed-publisher", "0 -");
    const reused = await grantAndPublish(twice.identity.runId, b);
    await bed.main.hset(bed.keys.run(twice.identity.runId), "publishing", `${reused} ${b}`);
    await recordPublishedFence(outputDir, reused, "ef".repeat(16));
    await grantAndPublish(runIdOf("someone-newest", 1), "ef".repeat(16));
    assert.deepEqual(await closeAbandonedRuns(store, sweeper), [twice.identity.runId]);
    const aborted = await readRun(bed.main, bed.keys, twice.identity.runId);
    assert.equal(aborted?.status, "aborted");
    assert.match(aborted?.reason ?? "", /that build may be published/);
  } finally {
    await bed.claims.del(bed.keys.claim(name), bed.keys.published(name));
    await bed.main.del(bed.keys.workerHeartbeat("sweeper"));
  }
});

test("a dead worker's record that was about to publish is left running while whether it published is not known (the claims Redis or the disk does not answer), by the sweep and by the job's next attempt", async () => {
  const jobId = "order-unknown-proof";
  const { store, identity } = await markedFirstAttempt(
    jobId,
    "gone-unknown",
    "swept-publisher",
    `5 ${"ab".repeat(16)}`,
  );
  await sweeperBeats("sweeper-unknown");
  try {
    const unknown = async () => ({ kind: "unknown" as const });
    const sweeper = { workerId: "sweeper-unknown", activeJobIds: () => [], judgesOthers: true, publishedBy: unknown };
    assert.deepEqual(await closeAbandonedRuns(store, sweeper), [], "not closed");
    const next = await beginAttempt(
      store,
      { ...identity, runId: runIdOf(jobId, 2), attempt: 2, previousRunId: identity.runId, publishProof: unknown },
      { mode: { kind: "running" } },
    );
    assert.equal(next.status, "began");
    assert.equal((await readRun(bed.main, bed.keys, identity.runId))?.status, "running", "left to a later sweep");
    // Not known for 5 minutes since its check before the publish (on the Redis clock): closed aborted.
    await checkedAgo(identity.runId, 301_000);
    assert.ok((await closeAbandonedRuns(store, sweeper)).includes(identity.runId), "closed past the patience");
    const record = await readRun(bed.main, bed.keys, identity.runId);
    assert.equal(record?.status, "aborted");
    assert.match(record?.reason ?? "", /that build may be published/);
  } finally {
    await bed.main.del(bed.keys.workerHeartbeat("sweeper-unknown"));
  }
});

test("whether a record that was about to publish did is never asked while its worker beats (the live publisher writes its own fence record), by the sweep or by the job's next attempt", async () => {
  const jobId = "order-live-publisher";
  const { store, identity } = await markedFirstAttempt(
    jobId,
    "live-publisher",
    "swept-publisher",
    `4 ${"ab".repeat(16)}`,
  );
  await sweeperBeats("sweeper-live");
  await bed.main.set(bed.keys.workerHeartbeat("live-publisher"), "1", "PX", 60_000);
  const asked: string[] = [];
  const ask = async (runId: string) => {
    asked.push(runId);
    return { kind: "unproven" as const };
  };
  try {
    const sweeper = {
      workerId: "sweeper-live",
      activeJobIds: () => [],
      judgesOthers: true,
      publishedBy: (run: { runId: string }) => ask(run.runId),
    };
    assert.deepEqual(await closeAbandonedRuns(store, sweeper), []);
    const next = await beginAttempt(
      store,
      { ...identity, runId: runIdOf(jobId, 2), attempt: 2, previousRunId: identity.runId, publishProof: ask },
      { mode: { kind: "running" } },
    );
    assert.equal(next.status, "began");
    assert.deepEqual(asked, [], "not asked");
    assert.equal((await readRun(bed.main, bed.keys, identity.runId))?.status, "running", "left to its attempt");
    // Its worker stops beating: the next sweep asks, and closes it.
    await bed.main.del(bed.keys.workerHeartbeat("live-publisher"));
    assert.ok((await closeAbandonedRuns(store, sweeper)).includes(identity.runId));
    assert.deepEqual(asked, [identity.runId]);
    assert.equal((await readRun(bed.main, bed.keys, identity.runId))?.status, "aborted");
  } finally {
    await bed.main.del(bed.keys.workerHeartbeat("sweeper-live"), bed.keys.workerHeartbeat("live-publisher"));
  }
});

test("an earlier attempt still in flight that was about to publish is not asked about by a later attempt (its worker may be live): left to the sweep, whatever its age", async () => {
  const jobId = "order-earlier-stray";
  const { store, identity } = await markedFirstAttempt(
    jobId,
    "stray-publisher",
    "swept-publisher",
    `3 ${"ab".repeat(16)}`,
  );
  // Its check long ago: past any patience.
  await checkedAgo(identity.runId, 600_000);
  const asked: string[] = [];
  // Attempt 3 begins (attempt 2 never did): attempt 1 is an earlier stray.
  const third = await beginAttempt(
    store,
    {
      ...identity,
      runId: runIdOf(jobId, 3),
      attempt: 3,
      previousRunId: runIdOf(jobId, 2),
      publishProof: async (runId: string) => {
        asked.push(runId);
        return { kind: "unproven" as const };
      },
    },
    { mode: { kind: "running" } },
  );
  assert.equal(third.status, "began");
  assert.deepEqual(asked, [], "not asked");
  assert.equal((await readRun(bed.main, bed.keys, identity.runId))?.status, "running", "left to the sweep");
});
