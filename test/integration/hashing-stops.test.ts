/**
 * A job whose inputs take long to read — large files, or one that never ends: here a FIFO a
 * child process feeds a byte every 200 ms and never closes, and a FIFO nobody writes to, whose
 * open blocks as a hung network mount would — stops for an operator's cancel and for a deploy's
 * SIGTERM while it is at them, on real worker processes: it is recorded cancelled (not retried),
 * or aborted and handed back to the queue. Before, the job waited for its input to end (here:
 * never), with no record at all. A job whose inputs take over INPUTS_VISIBLE_AFTER_MS to read
 * shows in the run history meanwhile: running, without a version until the read ends.
 */
import assert from "node:assert/strict";
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import path from "node:path";
import { after, before, test } from "node:test";
import fs from "node:fs";
import { cancelJob } from "../../lib/operations/cancel";
import { writeCancelRequest } from "../../lib/rebuilds/cancel-request";
import { outputDirOf } from "../../lib/rebuilds/definitions";
import { INPUTS_VISIBLE_AFTER_MS, RebuildError, runRebuild } from "../../lib/rebuilds/run-rebuild";
import { abandonedInputReads } from "../../lib/rebuilds/version";
import { abandonRun } from "../../lib/runs/abandoned";
import { DEFAULT_RETENTION, readRun, runPlaceOf } from "../../lib/runs/records";
import { beginAttempt } from "../../lib/runs/writer";
import { isFinalStatus } from "../../lib/runs/transitions";
import { replyLosingClient } from "../support/reply-losing";
import { createTestBed, rebuildDepsOf, type TestBed } from "../support/stack";
import { until } from "../support/until";

let bed: TestBed;
const feeders = new Set<ChildProcess>();
const fifoOf = (name: string) => path.join(bed.dir, `${name}.fifo`);

/** A rebuild of one no-op step whose inputs are `inputs` (in the bed's dir). */
const slowRebuild = (name: string, inputs: string[]) => ({
  output: `out/${name}`,
  inputs,
  steps: [{ name: "noop", run: ["true"] }],
});
/** FIFOs: inputs that end when a writer lets them (or never). */
const FIFO_INPUTS = [
  "slow-input-cancel",
  "slow-input-deploy",
  "slow-input-lock",
  "slow-input-cancelled",
  "slow-input-exists",
];
/**
 * Large sparse files (MiB): a few seconds to hash, no disk. A FIFO cannot stand in for them:
 * writing one changes its mtime, and an input that changes while it is read fails.
 */
const LARGE_INPUTS: Record<string, number> = {
  "slow-input-shown": 768,
  // Read by two attempts at once, the second starting after the first began: longer.
  "slow-input-closed": 1024,
  "slow-input-lost-reply": 768,
  "slow-input-version-fails": 768,
  "slow-input-cancel-late": 768,
  "slow-input-twice": 1024,
  "slow-input-closed-reply": 768,
};

before(async () => {
  // The bed's dir is made by createTestBed; the FIFOs are named there before anything reads them.
  bed = await createTestBed({
    ...Object.fromEntries(FIFO_INPUTS.map((name) => [name, slowRebuild(name, [`${name}.fifo`])])),
    ...Object.fromEntries(Object.keys(LARGE_INPUTS).map((name) => [name, slowRebuild(name, [`${name}.bin`])])),
    "slow-input-cancel": {
      ...slowRebuild("slow-input-cancel", ["slow-input-cancel.fifo"]),
      retries: { attempts: 3, backoff: "200ms", maxBackoff: "1s" },
    },
    // The large input takes seconds; the second is missing: the read fails after the record began.
    "slow-input-lost-reply": slowRebuild("slow-input-lost-reply", ["slow-input-lost-reply.bin", "missing.bin"]),
  });
  for (const name of FIFO_INPUTS) assert.equal(spawnSync("mkfifo", [fifoOf(name)]).status, 0, "mkfifo");
  for (const [name, mib] of Object.entries(LARGE_INPUTS)) {
    const large = path.join(bed.dir, `${name}.bin`);
    fs.writeFileSync(large, "");
    fs.truncateSync(large, mib * 1024 * 1024);
  }
});
after(async () => {
  for (const feeder of feeders) if (feeder.exitCode === null && feeder.signalCode === null) feeder.kill("SIGKILL");
  await bed.close();
});

/** A writer that opens the FIFO and writes a byte every 200 ms until nobody reads it. */
function feed(name: string): ChildProcess {
  const feeder = spawn("sh", ["-c", 'exec 3>"$1"; while printf x >&3; do sleep 0.2; done', "sh", fifoOf(name)], {
    stdio: "ignore",
  });
  feeders.add(feeder);
  return feeder;
}

/**
 * The job is at its input, and shows in the run history meanwhile: its one record is running,
 * without a version (the version is the inputs' hash).
 */
async function readingItsInputs(jobId: string): Promise<void> {
  await until("the job's record while it reads its inputs", async () => (await bed.runsOfJob(jobId)).length > 0);
  const [run, ...more] = await bed.runsOfJob(jobId);
  assert.equal(more.length, 0);
  assert.equal(run?.status, "running");
  assert.equal(run?.version ?? null, null, "no version before the read ends");
}

test("a cancel stops a job while it reads its inputs: recorded cancelled, not retried", async () => {
  const feeder = feed("slow-input-cancel");
  const worker = await bed.startWorker();
  try {
    const jobId = await bed.trigger("slow-input-cancel");
    await readingItsInputs(jobId);
    const operator = "test-operator (operator)";
    const result = await cancelJob(
      { queue: bed.queue, main: bed.main, keys: bed.keys },
      { jobId, actor: operator, reason: "input never ends" },
    );
    assert.equal(result.status, "cancelling");

    const run = await bed.waitForRun((r) => r.jobId === jobId && isFinalStatus(r.status), 20_000, "the job's record");
    assert.equal(run.status, "cancelled");
    assert.equal(run.reason, `cancelled by ${operator}: input never ends`);
    await until("the job failed in BullMQ", async () => (await bed.queue.getJobState(jobId)) === "failed");
    assert.equal((await bed.queue.getJob(jobId))?.attemptsStarted, 1, "not retried");
    assert.deepEqual(
      (await bed.runsOfJob(jobId)).map((r) => r.status),
      ["cancelled"],
    );
    assert.equal(worker.child.exitCode, null, "the worker serves on");
  } finally {
    await worker.stop();
    feeder.kill("SIGKILL");
  }
});

test("a deploy's SIGTERM stops a job stuck opening its input: recorded aborted, handed back to the queue", async () => {
  // Nobody writes to this FIFO: opening it blocks (as a hung mount would), and no abort can
  // interrupt that system call — the job must end without waiting for it.
  const worker = await bed.startWorker();
  try {
    const jobId = await bed.trigger("slow-input-deploy");
    await readingItsInputs(jobId);
    let timer: NodeJS.Timeout | undefined;
    const code = await Promise.race([
      worker.stop("SIGTERM"),
      new Promise<never>((_, reject) => {
        timer = setTimeout(
          () => reject(new Error(`the worker did not exit:\n${worker.output().slice(-2000)}`)),
          30_000,
        );
      }),
    ]).finally(() => clearTimeout(timer));
    // Node's process.exit would wait for the thread blocked in that open, for good: the worker
    // ends itself with SIGKILL once everything else is closed, and says why.
    assert.equal(code, null, `ended by a signal:\n${worker.output().slice(-2000)}`);
    assert.equal(worker.child.signalCode, "SIGKILL");
    assert.match(
      worker.output(),
      /shutdown: 1 input read\(s\) stuck in a system call \(a hung mount\?\); ending with SIGKILL/,
    );

    const [run, ...more] = await bed.runsOfJob(jobId);
    assert.equal(more.length, 0);
    assert.equal(run?.status, "aborted");
    assert.equal(run?.reason, "worker shutdown: job handed back to the queue");
    assert.equal(await bed.queue.getJobState(jobId), "waiting", "handed back, to run again on the next worker");
    assert.doesNotMatch(worker.output(), /not handed back/);
  } finally {
    await worker.stop("SIGKILL");
    await bed.queue.obliterate({ force: true });
  }
});

test("a job whose lock is lost while it is stuck opening its input: recorded aborted and retried, without waiting for the open", async () => {
  const lock = new AbortController();
  const attempt = runRebuild(rebuildDepsOf(bed), {
    id: "lock-lost-while-reading",
    attempt: 1,
    createdAt: Date.now(),
    data: { rebuild: "slow-input-lock", trigger: "api" as const },
    signal: lock.signal,
  });
  await new Promise((r) => setTimeout(r, 500)); // at the FIFO, waiting for a writer that never comes
  lock.abort("lock-lost");
  let timer: NodeJS.Timeout | undefined;
  const notStopped = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error("the attempt did not stop: still waiting at its input")), 10_000);
  });
  await assert.rejects(
    Promise.race([attempt, notStopped]).finally(() => clearTimeout(timer)),
    (error: unknown) => error instanceof RebuildError && error.retry && /job lock lost/.test(error.message),
  );
  const run = await readRun(bed.main, bed.keys, "lock-lost-while-reading-a1");
  assert.equal(run?.status, "aborted");
  assert.equal(
    run?.reason,
    "BullMQ job lock lost (the worker stalled, or its Redis restarted or failed over); the job is redelivered",
  );
  assert.equal(abandonedInputReads(), 1, "the open is left behind, counted");
  // Let the open through (it would hold this process's exit), and see it counted no more.
  fs.closeSync(fs.openSync(fifoOf("slow-input-lock"), fs.constants.O_WRONLY | fs.constants.O_NONBLOCK));
  await until("the stuck read ended", async () => abandonedInputReads() === 0, 10_000);
});

test("a job whose inputs take long to read shows running meanwhile; the same record gets the version and ends, and a repeat of it is skipped", async () => {
  const attemptOf = (id: string) => slowAttempt("slow-input-shown", id, 1);
  const first = attemptOf("shown-1");
  await until(
    "the record while the input is read",
    async () => (await readRun(bed.main, bed.keys, "shown-1-a1")) !== null,
  );
  const reading = await readRun(bed.main, bed.keys, "shown-1-a1");
  assert.equal(reading?.status, "running");
  assert.equal(reading?.version ?? null, null);
  const outcome = await first;
  assert.equal(outcome.status, "rebuilt");
  const done = await readRun(bed.main, bed.keys, "shown-1-a1");
  assert.equal(done?.status, "rebuilt");
  assert.equal(done?.version, outcome.status === "rebuilt" ? outcome.version : "?", "the version, on the same record");
  assert.ok(fs.existsSync(path.join(bed.dir, "out/slow-input-shown/current")), "published");
  assert.ok(done?.idempotencyKey);

  // The same input again: the record begins while it is read, then ends skipped (already rebuilt).
  const repeat = attemptOf("shown-2");
  await until("the repeat's record", async () => (await readRun(bed.main, bed.keys, "shown-2-a1")) !== null);
  assert.equal((await readRun(bed.main, bed.keys, "shown-2-a1"))?.status, "running");
  const skipped = await repeat;
  assert.equal(skipped.status, "skipped");
  assert.equal(skipped.status === "skipped" ? skipped.reason : "", "already-rebuilt");
  const run = await readRun(bed.main, bed.keys, "shown-2-a1");
  assert.equal(run?.status, "skipped");
  assert.equal(run?.reason, "already-rebuilt: already rebuilt by run shown-1-a1");
  assert.equal(run?.version, done?.version);
});

test("a job cancelled before its record begins while it reads its inputs: recorded cancelled, and the read stops", async () => {
  await writeCancelRequest(bed.main, bed.keys, "cancelled-reading", {
    actor: "test-operator (operator)",
    reason: "wrong input",
    at: Date.now(),
  });
  const began = Date.now();
  // The job's signal is never aborted here (no worker watches the request): the record's begin
  // finds the request and stops the read, which would otherwise wait for a writer for good.
  let timer: NodeJS.Timeout | undefined;
  const outcome = await Promise.race([
    runRebuild(rebuildDepsOf(bed), {
      id: "cancelled-reading",
      attempt: 1,
      createdAt: Date.now(),
      data: { rebuild: "slow-input-cancelled", trigger: "api" as const },
      signal: new AbortController().signal,
    }),
    new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error("the attempt did not stop: still waiting at its input")), 15_000);
    }),
  ]).finally(() => clearTimeout(timer));
  assert.ok(Date.now() - began >= INPUTS_VISIBLE_AFTER_MS);
  assert.deepEqual(outcome, {
    status: "cancelled",
    runId: "cancelled-reading-a1",
    reason: "cancelled by test-operator (operator): wrong input",
  });
  const run = await readRun(bed.main, bed.keys, "cancelled-reading-a1");
  assert.equal(run?.status, "cancelled");
  assert.equal(run?.reason, "cancelled by test-operator (operator): wrong input");
  // The open is left behind (no writer ever came): let it through so this process can exit.
  assert.equal(abandonedInputReads(), 1);
  fs.closeSync(fs.openSync(fifoOf("slow-input-cancelled"), fs.constants.O_WRONLY | fs.constants.O_NONBLOCK));
  await until("the stuck read ended", async () => abandonedInputReads() === 0, 10_000);
});

/**
 * A slow-input attempt of `rebuild`, run in this process. Its record begins after 100 ms of
 * reading (not 1 s): the large inputs here take about a second to hash on a fast machine, and
 * the tests look at the record while they are read.
 */
function readingDeps(): ReturnType<typeof rebuildDepsOf> {
  return { ...rebuildDepsOf(bed), inputsVisibleAfterMs: 100 };
}

function slowAttempt(rebuild: string, id: string, attempt: number, deps = readingDeps()) {
  return runRebuild(deps, {
    id,
    attempt,
    createdAt: Date.now(),
    data: { rebuild, trigger: "api" as const },
    signal: new AbortController().signal,
  });
}

test("an attempt whose record the job's next attempt closed while it read its inputs takes no claim: it does not publish under an aborted record", async () => {
  // Attempt 1 lost its job lock while it read (a stall); the job was picked up again as attempt 2,
  // whose record's begin closes attempt 1's as aborted. Attempt 1 finds that when its read ends.
  const first = slowAttempt("slow-input-closed", "closed", 1).then(
    (outcome) => outcome,
    (error: unknown) => error,
  );
  let firstDone = false;
  void first.then(() => (firstDone = true));
  await until("attempt 1's record", async () => (await readRun(bed.main, bed.keys, "closed-a1"))?.status === "running");
  const second = slowAttempt("slow-input-closed", "closed", 2);
  await until("attempt 2's record", async () => (await readRun(bed.main, bed.keys, "closed-a2"))?.status === "running");
  assert.equal(
    (await readRun(bed.main, bed.keys, "closed-a1"))?.status,
    "aborted",
    "attempt 2 closed attempt 1's record",
  );
  assert.equal(firstDone, false, "attempt 1 is still reading (else this test shows nothing)");

  // It does not go on; it defers (the request is kept, no attempt spent: in the worker, the
  // queue refuses the move of a pickup that lost its job lock).
  const outcome = await first;
  assert.equal((outcome as { status?: string }).status, "deferred", `attempt 1 does not go on: ${String(outcome)}`);
  const closed = await readRun(bed.main, bed.keys, "closed-a1");
  assert.equal(closed?.status, "aborted");
  assert.equal(closed?.version ?? null, null, "nothing was written on the closed record");

  const rebuilt = await second;
  assert.equal(rebuilt.status, "rebuilt", "attempt 2 builds and publishes");
  const run = await readRun(bed.main, bed.keys, "closed-a2");
  assert.equal(run?.status, "rebuilt");
  assert.equal(await bed.main.get(bed.keys.idempotency(run?.idempotencyKey ?? "?")), "closed-a2");
});

test("the reply to the record's begin is lost while the inputs are read (ioredis resends it): the attempt still ends its record", async () => {
  const proxied = await replyLosingClient(bed.redis.port, "lost-reply-a1");
  try {
    const outcome = await slowAttempt("slow-input-lost-reply", "lost-reply", 1, {
      ...readingDeps(),
      main: proxied.main,
    }).catch((error: unknown) => error);
    assert.ok(proxied.cut(), "the begin's reply was dropped");
    assert.ok(outcome instanceof RebuildError, `the attempt fails (an input is missing): ${JSON.stringify(outcome)}`);
    const run = await readRun(bed.main, bed.keys, "lost-reply-a1");
    assert.equal(run?.status, "failed", "its record ends, not left running");
    assert.match(run?.reason ?? "", /inputs unreadable/);
  } finally {
    await proxied.close();
  }
});

test("the reply to the record's begin is lost and the record closed before the resend (the sweep, the job's next attempt): the attempt takes no claim", async () => {
  const identity = {
    runId: "closed-reply-a1",
    jobId: "closed-reply",
    rebuild: "slow-input-closed-reply",
    tenant: null,
  };
  const proxied = await replyLosingClient(bed.redis.port, "closed-reply-a1", () =>
    abandonRun({ client: bed.main, keys: bed.keys, retention: DEFAULT_RETENTION }, identity, "closed by the test"),
  );
  try {
    const outcome = await slowAttempt("slow-input-closed-reply", "closed-reply", 1, {
      ...readingDeps(),
      main: proxied.main,
    }).catch((error: unknown) => error);
    assert.ok(proxied.cut(), "the begin's reply was dropped");
    // It stops reading at once and defers: the request is kept, no attempt spent.
    assert.equal((outcome as { status?: string }).status, "deferred", `the attempt does not go on: ${String(outcome)}`);
    const run = await readRun(bed.main, bed.keys, "closed-reply-a1");
    assert.equal(run?.status, "aborted");
    assert.equal(
      fs.existsSync(path.join(bed.dir, "out/slow-input-closed-reply/current")),
      false,
      "nothing was published",
    );
  } finally {
    await proxied.close();
  }
});

test("the version cannot be recorded on the record that began while the inputs were read: the record ends failed, the attempt is retried", async () => {
  const attempt = slowAttempt("slow-input-version-fails", "version-fails", 1).catch((error: unknown) => error);
  await until(
    "the record while the input is read",
    async () => (await readRun(bed.main, bed.keys, "version-fails-a1"))?.status === "running",
  );
  // A key of the wrong type where the version's write reads the job's cancel request: that write
  // fails (WRONGTYPE); writes of the record itself still work.
  await bed.main.hset(bed.keys.cancelRequest("version-fails"), "not", "a string");
  try {
    const outcome = await attempt;
    assert.ok(outcome instanceof RebuildError, `the attempt fails: ${JSON.stringify(outcome)}`);
    assert.equal(outcome.retry, true, "retried");
    assert.match(outcome.message, /recording the attempt's version failed/);
    const run = await readRun(bed.main, bed.keys, "version-fails-a1");
    assert.equal(run?.status, "failed", "its record ends, not left running");
    assert.match(run?.reason ?? "", /recording the attempt's version failed: .*WRONGTYPE.*; retried/);
  } finally {
    await bed.main.del(bed.keys.cancelRequest("version-fails"));
  }
});

test("a cancel requested after the record began, while the inputs are read: the version's write finds it, recorded cancelled, no claim taken", async () => {
  const attempt = slowAttempt("slow-input-cancel-late", "cancel-late", 1);
  await until(
    "the record while the input is read",
    async () => (await readRun(bed.main, bed.keys, "cancel-late-a1"))?.status === "running",
  );
  // No worker watches the request here (the job's signal is never aborted): the version's write
  // is where the attempt meets it.
  await writeCancelRequest(bed.main, bed.keys, "cancel-late", {
    actor: "test-operator (operator)",
    reason: "not now",
    at: Date.now(),
  });
  const outcome = await attempt;
  assert.deepEqual(outcome, {
    status: "cancelled",
    runId: "cancel-late-a1",
    reason: "cancelled by test-operator (operator): not now",
  });
  const run = await readRun(bed.main, bed.keys, "cancel-late-a1");
  assert.equal(run?.status, "cancelled");
  assert.equal(run?.reason, "cancelled by test-operator (operator): not now");
  assert.ok(run?.version, "the version is on the record");
  assert.equal(fs.existsSync(path.join(bed.dir, "out/slow-input-cancel-late/current")), false, "nothing was published");
});

test("the same attempt picked up twice (the queue forgot a pickup): the second, while it reads, takes the record over; stopped, it ends it, and the first, reading on, does not go on", async () => {
  const first = slowAttempt("slow-input-twice", "twice", 1).then(
    (outcome) => `returned ${outcome.status}`,
    (error: unknown) => (error instanceof RebuildError ? error.message : `threw ${String(error)}`),
  );
  await until("the first's record", async () => (await readRun(bed.main, bed.keys, "twice-a1"))?.status === "running");
  const firstWorker = (await readRun(bed.main, bed.keys, "twice-a1"))?.workerId;
  // The same job and attempt number again, in another "process" (its own begin calls): its record's
  // begin while it reads finds the first's record in flight and takes it over (the queue gave the
  // job to it: the first has lost its job lock).
  const stop = new AbortController();
  const second = runRebuild(
    { ...readingDeps(), worker: { ...readingDeps().worker, id: "second-pickup" } },
    {
      id: "twice",
      attempt: 1,
      createdAt: Date.now(),
      data: { rebuild: "slow-input-twice", trigger: "api" as const },
      signal: stop.signal,
    },
  );
  await until(
    "the second took the record over",
    async () => (await readRun(bed.main, bed.keys, "twice-a1"))?.workerId === "second-pickup",
  );
  assert.notEqual(firstWorker, "second-pickup");
  stop.abort("shutdown");
  assert.equal((await second).status, "handed-back");
  const ended = await readRun(bed.main, bed.keys, "twice-a1");
  assert.equal(ended?.status, "aborted", "the second's hand-back ends the record");
  // The first's version write finds the record another pickup's (ended by it, or still taken over):
  // it takes no claim, publishes nothing.
  assert.equal(await first, "returned deferred");
  const after = await readRun(bed.main, bed.keys, "twice-a1");
  assert.equal(after?.status, "aborted");
  assert.equal(after?.version ?? null, null, "the first's version was not written");
  const output = outputDirOf(bed.definitions.rebuilds.get("slow-input-twice")!, undefined);
  assert.equal(fs.existsSync(path.join(output, "current")), false, "nothing published");
});

test("a pickup whose record another live pickup of the same attempt has, found while it reads its inputs: the read stops at once (a FIFO nobody writes), the pickup defers and writes nothing", async () => {
  const store = { client: bed.main, keys: bed.keys, retention: DEFAULT_RETENTION };
  const other = {
    ...runPlaceOf("slow-input-exists", undefined),
    runId: "exists-a1",
    jobId: "exists",
    attempt: 1,
    previousRunId: null,
    rebuildName: "slow-input-exists",
    createdAt: Date.now(),
    trigger: "api" as const,
    workerId: "the-live-pickup",
    host: "h",
  };
  await bed.main.set(bed.keys.workerHeartbeat("the-live-pickup"), "1", "PX", 60_000);
  assert.equal((await beginAttempt(store, other, { mode: { kind: "running" } })).status, "began");
  const stop = new AbortController();
  const attempt = runRebuild(readingDeps(), {
    id: "exists",
    attempt: 1,
    createdAt: Date.now(),
    data: { rebuild: "slow-input-exists", trigger: "api" as const },
    signal: stop.signal,
  });
  try {
    const outcome = await Promise.race([
      attempt,
      new Promise<"still reading">((resolve) => setTimeout(() => resolve("still reading"), 20_000).unref()),
    ]);
    assert.notEqual(outcome, "still reading", "the read of an input nobody writes did not stop");
    assert.equal((outcome as { status?: string }).status, "deferred", JSON.stringify(outcome));
    const record = await readRun(bed.main, bed.keys, "exists-a1");
    assert.equal(record?.status, "running", "the live pickup's record, untouched");
    assert.equal(record?.workerId, "the-live-pickup");
  } finally {
    stop.abort("shutdown");
    await attempt.catch(() => {});
    await bed.main.del(bed.keys.workerHeartbeat("the-live-pickup"));
    // Let the open through (it would hold this process's exit).
    fs.closeSync(fs.openSync(fifoOf("slow-input-exists"), fs.constants.O_WRONLY | fs.constants.O_NONBLOCK));
    await until("the stuck read ended", async () => abandonedInputReads() === 0, 10_000);
  }
});
