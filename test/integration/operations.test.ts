/**
 * Issue 15, operator actions on the real stack (a real Redis, real worker processes): cancel a
 * running rebuild (its steps stop, its claim goes, no retry, no step process left), cancel a
 * waiting job and a job deferred behind another version's claim (which the queue view explains),
 * retry a failed run, pause and resume a schedule (nothing enqueued while paused, also across a
 * worker restart; no missed tick), and one job per "Rebuild now" request id.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { Queue, UnrecoverableError, Worker, type Job } from "bullmq";
import { acquireClaim, claimName, readClaim, releaseClaim } from "../../lib/claims";
import { listAudit } from "../../lib/audit";
import { missedTickProblems } from "../../lib/health/operations";
import { cancelJob } from "../../lib/operations/cancel";
import { readQueueView } from "../../lib/operations/queue-view";
import { readRetriedAs, retryRun } from "../../lib/operations/retry";
import { changeSchedule } from "../../lib/operations/schedule";
import { CANCEL_POLL_MS } from "../../lib/rebuilds/cancel-request";
import { writeDeferNote } from "../../lib/rebuilds/defer-note";
import { recordUnrunAttempt } from "../../lib/rebuilds/unrun-attempt";
import { queuePrefix, REBUILD_QUEUE, scheduledTickOf } from "../../lib/rebuilds/queue";
import { readSchedulePause } from "../../lib/rebuilds/schedules";
import { triggerRebuild } from "../../lib/rebuilds/trigger";
import { redisKeys } from "../../lib/redis/keys";
import { DEFAULT_RETENTION } from "../../lib/runs/records";
import { importRunInto } from "../../lib/runs/writer";
import { isFinalStatus } from "../../lib/runs/transitions";
import { killMarkedProcesses, newMarker, pidsWithMarker, waitUntilNoMarker } from "../support/markers";
import { createTestBed, type TestBed } from "../support/stack";
import { until } from "../support/until";

const KILL_GRACE_MS = 1_000;
let bed: TestBed;
const marker = newMarker();

before(async () => {
  bed = await createTestBed({
    slow: {
      output: "out/slow",
      claim: { ttl: "4s", refreshEvery: "1s" },
      timeLimit: "5m",
      // Retries would hide a cancel that does not stick: a cancelled job must fail, not retry.
      retries: { attempts: 3, backoff: "200ms", maxBackoff: "1s" },
      steps: [
        {
          name: "work",
          // Ignores SIGTERM: only the SIGKILL after killGrace ends it.
          run: ["sh", "-c", 'trap "" TERM; i=0; while [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done'],
          killGrace: `${KILL_GRACE_MS}ms`,
          env: { [marker.name]: marker.value },
        },
      ],
    },
    flaky: {
      output: "out/flaky",
      claim: { ttl: "4s", refreshEvery: "1s" },
      timeLimit: "1m",
      retries: { attempts: 1, backoff: "200ms", maxBackoff: "1s" },
      steps: [{ name: "fail", run: ["sh", "-c", "echo broken >&2; exit 3"] }],
    },
    ticking: {
      output: "out/ticking",
      schedule: { cron: "*/2 * * * * *", tz: "UTC" }, // every 2 s
      claim: { ttl: "4s", refreshEvery: "1s" },
      timeLimit: "1m",
      idempotency: { ttl: "1s" },
      steps: [{ name: "noop", run: ["true"] }],
    },
  });
});
after(async () => {
  killMarkedProcesses();
  await bed.close();
});

const operator = "test-operator (operator)";
const deps = () => ({ queue: bed.queue, main: bed.main, keys: bed.keys, definitions: bed.definitions });

const slowClaim = () => claimName(bed.definitions.rebuilds.get("slow")!.claimPath);

test("cancel a running rebuild: steps killed, claim released within killGrace + 1 s, run cancelled, no retry", async () => {
  const worker = await bed.startWorker();
  try {
    const jobId = await bed.trigger("slow", { version: "c1" });
    const running = await bed.waitForRun((r) => r.jobId === jobId && r.status === "running", 30_000);
    await until("the step's process", async () => pidsWithMarker(marker).length > 0);
    await until("the claim", () => readClaim(bed.claims, bed.keys, slowClaim()));

    const result = await cancelJob(deps(), { jobId, actor: operator, reason: "wrong input file" });
    assert.equal(result.status, "cancelling");
    assert.equal((result as { runId: string | null }).runId, running.id);
    const requested = performance.now();

    // The step ignores SIGTERM: the claim can only go after the SIGKILL at killGrace.
    await until("the claim released", async () => !(await readClaim(bed.claims, bed.keys, slowClaim())), 10_000);
    const releasedAfter = performance.now() - requested;
    assert.ok(
      releasedAfter <= KILL_GRACE_MS + 1_000 + CANCEL_POLL_MS,
      `claim released ${Math.round(releasedAfter)} ms after the cancel (killGrace ${KILL_GRACE_MS} ms + 1 s + one poll)`,
    );
    const cancelled = await bed.waitForRun((r) => r.id === running.id && isFinalStatus(r.status), 10_000);
    assert.equal(cancelled.status, "cancelled");
    assert.equal(cancelled.reason, `cancelled by ${operator}: wrong input file`);

    // Not retried: BullMQ failed the job (a final state), and it had one attempt only.
    await until("the job failed in BullMQ", async () => (await bed.queue.getJobState(jobId)) === "failed");
    const job = await bed.queue.getJob(jobId);
    assert.equal(job?.attemptsStarted, 1);
    assert.deepEqual(
      (await bed.runsOfJob(jobId)).map((r) => r.status),
      ["cancelled"],
    );
    // The queue (API, page and CLI read this view) says cancelled, not failed.
    const shown = (await readQueueView(bed.queue, bed.main, bed.keys, { rebuild: "slow" })).jobs.find(
      (j) => j.jobId === jobId,
    );
    assert.equal(shown?.state, "cancelled");
    const { alive } = await waitUntilNoMarker(marker, 2_000);
    assert.deepEqual(alive, [], "no process of the step is left");

    const audit = (await listAudit(bed.main, bed.keys, { limit: 20 })).entries.find(
      (e) => e.action === "cancel" && e.detail.jobId === jobId,
    );
    assert.equal(audit?.actor, operator);
    assert.equal(audit?.reason, "wrong input file");
    assert.equal(audit?.result, "done");
  } finally {
    await worker.stop();
  }
});

test("a trigger of the same version while a job is being cancelled is not skipped behind it: it waits for the claim (black-box helper-174: skipped claim-held, the request lost)", async () => {
  const worker = await bed.startWorker();
  let second: string | null = null;
  try {
    const jobId = await bed.trigger("slow", { version: "c9" });
    await bed.waitForRun((r) => r.jobId === jobId && r.status === "running", 30_000);
    await until("the step's process", async () => pidsWithMarker(marker).length > 0);
    await until("the claim", () => readClaim(bed.claims, bed.keys, slowClaim()));
    const cancelled = await cancelJob(deps(), { jobId, actor: operator, reason: "wrong input" });
    assert.equal(cancelled.status, "cancelling");

    // The step ignores SIGTERM: the holder keeps the claim until its killGrace ends.
    second = await bed.trigger("slow", { version: "c9" });
    assert.notEqual(second, jobId, "a job of its own, not folded into the one being cancelled");
    const first = await bed.waitForRun((r) => r.jobId === second && r.status !== "running", 30_000);
    assert.equal(first.status, "deferred", `${first.status}: ${first.reason}`);
    assert.match(first.reason ?? "", /whose job is being cancelled/);
    await bed.waitForRun((r) => r.jobId === jobId && r.status === "cancelled", 30_000);
  } finally {
    if (second) await cancelJob(deps(), { jobId: second, actor: operator, reason: "test over" }).catch(() => null);
    if (second) await bed.waitForRun((r) => r.jobId === second && r.status === "cancelled", 60_000).catch(() => null);
    await worker.stop();
    killMarkedProcesses();
  }
});

test("cancel a waiting job: removed from the queue and recorded cancelled; a finished job is refused", async () => {
  // No worker runs: the job waits.
  const jobId = await bed.trigger("slow", { version: "w1" });
  assert.equal(await bed.queue.getJobState(jobId), "waiting");
  const result = await cancelJob(deps(), { jobId, actor: operator, reason: "not needed" });
  assert.equal(result.status, "removed");
  assert.equal(await bed.queue.getJob(jobId), undefined);
  const [run] = await bed.runsOfJob(jobId);
  assert.equal(run?.status, "cancelled");
  assert.equal(run?.version, "w1");
  assert.match(run?.reason ?? "", /^cancelled by test-operator \(operator\): not needed$/);

  // The same request again: nothing left to cancel (refused, audited), and it says how the job
  // ended rather than calling it unknown.
  const again = await cancelJob(deps(), { jobId, actor: operator, reason: "twice" });
  assert.equal(again.status, "finished");
  assert.ok(again.status === "finished");
  assert.equal(again.state, "removed");
  assert.deepEqual(again.lastRun, { id: run!.id, status: "cancelled" });
  assert.equal(
    (await cancelJob(deps(), { jobId: "never-queued", actor: operator, reason: "typo" })).status,
    "not-found",
  );
  // A "Rebuild now" of the same version queues a new job (the waiting-trigger marker was dropped).
  const next = await bed.trigger("slow", { version: "w1" });
  assert.notEqual(next, jobId);
  assert.equal((await cancelJob(deps(), { jobId: next, actor: operator, reason: "tidy up" })).status, "removed");
});

test("a job deferred without a record of its own (another pickup has the attempt's record): the queue view shows the worker's note for that delay only", async () => {
  const job = await bed.queue.add(
    "slow",
    { rebuild: "slow", version: "n1", force: false, trigger: "api" },
    { delay: 60_000 },
  );
  const entryOf = async () =>
    (await readQueueView(bed.queue, bed.main, bed.keys, { rebuild: "slow" })).jobs.find((j) => j.jobId === job.id);
  try {
    const before = await entryOf();
    assert.equal(before?.state, "delayed");
    assert.deepEqual(before?.waitReason, { kind: "queued", detail: "delayed when queued" });
    // A note written for another delay (an earlier deferral, before a backoff moved the job) is stale.
    await writeDeferNote(bed.main, bed.keys, job.id!, { reason: "old note", until: before!.nextAttemptAt! - 5_000 });
    assert.deepEqual((await entryOf())?.waitReason, { kind: "queued", detail: "delayed when queued" });
    const reason = "the attempt's record is another pickup's of this attempt (running): this pickup does not go on";
    await writeDeferNote(bed.main, bed.keys, job.id!, { reason, until: before!.nextAttemptAt! });
    assert.deepEqual((await entryOf())?.waitReason, { kind: "deferred", detail: reason, runId: null });
  } finally {
    await job.remove();
  }
});

test("a job deferred behind another version's claim: the queue view says why and when; cancel removes it", async () => {
  const name = slowClaim();
  const other = await acquireClaim(
    bed.claims,
    bed.keys,
    name,
    { jobId: "job-other", version: "other-version", rebuild: "slow", workerId: "other-worker" },
    { ttlMs: 120_000, refreshEveryMs: 1_000 },
  );
  assert.equal(other.status, "acquired");
  const worker = await bed.startWorker();
  try {
    const jobId = await bed.trigger("slow", { version: "d1" });
    await bed.waitForRun((r) => r.jobId === jobId && r.status === "deferred", 30_000);
    const entry = await until("the job delayed in the queue view", async () => {
      const view = await readQueueView(bed.queue, bed.main, bed.keys, { rebuild: "slow" });
      return view.jobs.find((j) => j.jobId === jobId && j.state === "delayed");
    });
    assert.equal(entry.waitReason?.kind, "deferred");
    assert.match(
      entry.waitReason!.detail,
      new RegExp(`${name.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")} is held by other-worker building other-version`),
    );
    assert.ok(entry.nextAttemptAt && entry.nextAttemptAt > entry.createdAt, "a next attempt time");
    assert.equal(entry.version, "d1");

    const result = await cancelJob(deps(), { jobId, actor: operator, reason: "superseded by other-version" });
    // Delayed (removed here), or picked up again meanwhile (the worker cancels it at pickup).
    assert.ok(result.status === "removed" || result.status === "cancelling", result.status);
    const runs = await until("the job's cancelled record", async () => {
      const all = await bed.runsOfJob(jobId);
      return all.some((r) => r.status === "cancelled") ? all : null;
    });
    assert.deepEqual(
      runs.map((r) => r.status),
      ["deferred", "cancelled"],
    );
    // The other version's claim is untouched.
    assert.equal((await readClaim(bed.claims, bed.keys, name))?.token, (other as { token: string }).token);
  } finally {
    await worker.stop();
    await releaseClaim(bed.claims, bed.keys, name, (other as { token: string }).token);
  }
});

test("retry a failed run: same rebuild and version, forced, linked back, audited", async () => {
  const worker = await bed.startWorker();
  try {
    const jobId = await bed.trigger("flaky", { version: "f1" });
    const failed = await bed.waitForRun((r) => r.jobId === jobId && r.status === "failed", 30_000);
    const refused = await retryRun(deps(), { runId: "nope-a1", actor: operator, reason: "x" });
    assert.equal(refused.status, "not-found");

    const result = await retryRun(deps(), { runId: failed.id, actor: operator, reason: "fixed the input" });
    assert.equal(result.status, "queued");
    const { jobId: retryJob } = result as { jobId: string };
    const retried = await bed.waitForRun((r) => r.jobId === retryJob && isFinalStatus(r.status), 30_000);
    assert.equal(retried.retryOf, failed.id);
    assert.equal(retried.version, "f1");
    assert.equal(retried.rebuild, "flaky");
    assert.equal((await bed.queue.getJob(retryJob))?.data.force, true);

    const audit = (await listAudit(bed.main, bed.keys, { limit: 20 })).entries.find(
      (e) => e.action === "retry" && e.detail.runId === failed.id,
    );
    assert.equal(audit?.detail.jobId, retryJob);
    // A run that did its work is not retried.
    const rebuilt = await retryRun(deps(), { runId: retried.id, actor: operator, reason: "again" });
    assert.equal(rebuilt.status, retried.status === "failed" ? "queued" : "not-retryable");
  } finally {
    await worker.stop();
  }
});

test("an aborted attempt whose job went on is not retried when the next attempt's record is gone from the history (retention) while its own stays (black-box helper-181)", async () => {
  // As the next pickup closes a dead attempt: "… redelivered as attempt 3"; attempt 3's record and
  // the job itself (finished, removed by the queue's retention) are gone; this record stays.
  const now = Date.now();
  const tx = bed.main.multi();
  importRunInto(
    tx,
    bed.keys,
    {
      id: "went-on-a2",
      jobId: "went-on",
      attempt: 2,
      rebuild: "flaky",
      tenant: null,
      version: "f9",
      status: "aborted",
      reason: "worker died or stalled (BullMQ job lock lost); the job was redelivered as attempt 3",
      trigger: "api",
      workerId: "w",
      host: "h",
      createdAt: now - 60_000,
      startedAt: now - 60_000,
      finishedAt: now - 30_000,
      durationMs: 30_000,
      fence: null,
      buildHash: null,
      idempotencyKey: null,
      progress: 0,
      steps: [],
    },
    DEFAULT_RETENTION,
  );
  await tx.exec();
  const refused = await retryRun(deps(), { runId: "went-on-a2", actor: operator, reason: "looked stuck" });
  assert.equal(refused.status, "job-went-on", JSON.stringify(refused));
  assert.deepEqual(
    {
      laterRunId: (refused as { laterRunId: string }).laterRunId,
      laterStatus: (refused as { laterStatus: string }).laterStatus,
    },
    { laterRunId: "went-on-a3", laterStatus: "trimmed" },
  );
  const jobs = await bed.queue.getJobs(["waiting", "delayed", "active", "completed", "failed"]);
  assert.ok(!jobs.some((job) => job.data.retryOf === "went-on-a2"), "nothing queued");
});

test("a run retried once is not retried again while that job is to run: refused naming it; the same request again gets its job; once it ended, a Retry queues again (black-box helper-126)", async () => {
  let worker = await bed.startWorker();
  let failedId: string;
  try {
    const jobId = await bed.trigger("flaky", { version: "f2" });
    failedId = (await bed.waitForRun((r) => r.jobId === jobId && r.status === "failed", 30_000)).id;
  } finally {
    await worker.stop();
  }
  // No worker runs: the retry's job waits.
  const retry = (reason: string, requestId?: string) =>
    retryRun(deps(), { runId: failedId, actor: operator, reason, ...(requestId ? { requestId } : {}) });
  const first = await retry("fixed the input", "retry-once-0001");
  assert.equal(first.status, "queued");
  const { jobId: retryJob } = first as { jobId: string };
  assert.equal((await readRetriedAs(bed.main, bed.keys, failedId))?.jobId, retryJob, "the run names its retry");

  const again = await retry("again, from another tab");
  assert.equal(again.status, "already-retried", JSON.stringify(again));
  assert.equal((again as { jobId: string }).jobId, retryJob);
  assert.match((again as { jobState: string }).jobState, /^(waiting|prioritized|delayed)$/);
  const refusedAudit = (await listAudit(bed.main, bed.keys, { limit: 20 })).entries.find(
    (e) => e.action === "retry" && e.result === "refused" && e.detail.outcome === "already-retried",
  );
  assert.equal(refusedAudit?.detail.jobId, retryJob, "the refusal is audited");
  // The same request sent again (its answer lost) is answered with its job, not refused.
  const resent = await retry("fixed the input", "retry-once-0001");
  assert.deepEqual([resent.status, (resent as { jobId: string }).jobId], ["deduplicated", retryJob]);

  // Once that job has ended, a Retry queues a new one.
  worker = await bed.startWorker();
  try {
    await bed.waitForRun((r) => r.jobId === retryJob && isFinalStatus(r.status), 30_000);
    await until("the retry's job ended", async () =>
      ["completed", "failed"].includes(await bed.queue.getJobState(retryJob)),
    );
  } finally {
    await worker.stop();
  }
  const later = await retry("once more");
  assert.equal(later.status, "queued", JSON.stringify(later));
  assert.notEqual((later as { jobId: string }).jobId, retryJob);
  await (await bed.queue.getJob((later as { jobId: string }).jobId))?.remove();
});

test("a Retry of a job's attempt written after another attempt, or that Retry's run, was retried (the queue gave the job up) is refused while that retry is pending: one forced rebuild, not two; once it ended, it queues (review helper-176)", async () => {
  const worker = await bed.startWorker();
  let failedId: string;
  let jobId: string;
  let retryJob: string;
  let retryRunId: string;
  try {
    jobId = await bed.trigger("flaky", { version: "f3" });
    failedId = (await bed.waitForRun((r) => r.jobId === jobId && r.status === "failed", 30_000)).id;
    // Retried, and the retry failed as well.
    const first = await retryRun(deps(), { runId: failedId, actor: operator, reason: "fixed the input" });
    assert.equal(first.status, "queued", JSON.stringify(first));
    retryJob = (first as { jobId: string }).jobId;
    retryRunId = (await bed.waitForRun((r) => r.jobId === retryJob && r.status === "failed", 30_000)).id;
  } finally {
    await worker.stop();
  }
  // The retry's run retried in its turn (no worker runs: its job waits) …
  const again = await retryRun(deps(), { runId: retryRunId, actor: operator, reason: "fixed it for real" });
  assert.equal(again.status, "queued", JSON.stringify(again));
  const { jobId: secondRetryJob } = again as { jobId: string };
  // … and a worker picked it up (a job still waiting would take the next Retry in as the same
  // request): taken by hand here, so it stays active while the rest is asked.
  const connection = bed.main.duplicate();
  const picker = new Worker(REBUILD_QUEUE, null, { connection, prefix: queuePrefix(bed.keys) });
  let picked: Job | undefined = await picker.getNextJob("operations-test-picker");
  try {
    assert.equal(picked?.id, secondRetryJob);
    // The first job's next attempt is recorded after those Retries, failed: what the worker writes
    // when the queue gives a job up at its next pickup (lib/rebuilds/unrun-attempt.ts).
    const job = (await bed.queue.getJob(jobId))!;
    const failedRun = (await bed.allRuns()).find((r) => r.id === failedId)!;
    const { runId: laterId } = await recordUnrunAttempt(
      { client: bed.main, keys: bed.keys, retention: DEFAULT_RETENTION },
      job,
      { attempt: failedRun.attempt + 1, status: "failed", reason: "the queue gave this job up: retry this run" },
    );
    assert.notEqual(laterId, failedId);

    const refused = await retryRun(deps(), {
      runId: laterId,
      actor: operator,
      reason: "from the newer attempt's page",
    });
    assert.equal(refused.status, "already-retried", JSON.stringify(refused));
    assert.equal(
      (refused as { jobId: string }).jobId,
      secondRetryJob,
      "the pending one, found through the first retry",
    );
    assert.equal((refused as { viaRunId?: string }).viaRunId, retryRunId);
    const forced = (await bed.queue.getJobs(["waiting", "delayed", "prioritized"])).filter(
      (j) => j?.data.force === true && j.data.rebuild === "flaky",
    );
    assert.deepEqual(
      forced.map((j) => j?.id),
      [],
      "no second forced job queued behind the one running",
    );

    // Once that retry ended, a Retry of the newer attempt queues.
    await picked?.moveToFailed(new UnrecoverableError("retry over"), "operations-test-picker");
    picked = undefined;
    const queued = await retryRun(deps(), { runId: laterId, actor: operator, reason: "the retry failed too" });
    assert.equal(queued.status, "queued", JSON.stringify(queued));
  } finally {
    for (const j of await bed.queue.getJobs(["waiting", "delayed", "prioritized"]))
      if (j?.data.force === true && j.data.rebuild === "flaky") await j.remove();
    await picked?.moveToFailed(new UnrecoverableError("test over"), "operations-test-picker");
    await picker.close();
    connection.disconnect();
  }
});

test("a Retry of a run whose job is still in the queue (handed back by a deploy) is refused: the queue runs it again; parallel Retries of one run queue one job (black-box helper-174)", async () => {
  let worker = await bed.startWorker();
  let jobId: string;
  try {
    jobId = await bed.trigger("slow", { version: "c10" });
    await bed.waitForRun((r) => r.jobId === jobId && r.status === "running", 30_000);
  } finally {
    await worker.stop(); // a deploy: the job goes back to the queue
  }
  const handedBack = (await bed.waitForRun((r) => r.jobId === jobId && r.status === "aborted", 30_000)).id;
  assert.match(await bed.queue.getJobState(jobId), /^(waiting|prioritized)$/);
  const pending = await retryRun(deps(), { runId: handedBack, actor: operator, reason: "looks stuck" });
  assert.equal(pending.status, "job-pending", JSON.stringify(pending));
  assert.equal((pending as { queuedJobId: string }).queuedJobId, jobId);
  await cancelJob(deps(), { jobId, actor: operator, reason: "test: end it" });
  killMarkedProcesses();

  // A run whose job ended: five Retries at once, each its own request.
  worker = await bed.startWorker();
  let failedId: string;
  try {
    const flaky = await bed.trigger("flaky", { version: "f5" });
    failedId = (await bed.waitForRun((r) => r.jobId === flaky && r.status === "failed", 30_000)).id;
  } finally {
    await worker.stop();
  }
  const answers = await Promise.all(
    [1, 2, 3, 4, 5].map((n) =>
      retryRun(deps(), { runId: failedId, actor: operator, reason: `tab ${n}`, requestId: `parallel-retry-000${n}` }),
    ),
  );
  const queued = answers.filter((a) => a.status === "queued");
  assert.equal(queued.length, 1, JSON.stringify(answers.map((a) => a.status)));
  for (const answer of answers.filter((a) => a.status !== "queued"))
    assert.match(answer.status, /^(retry-in-progress|already-retried)$/);
  const forced = (await bed.queue.getJobs(["waiting", "delayed", "prioritized"])).filter(
    (j) => j?.data.retryOf === failedId,
  );
  assert.equal(forced.length, 1, "one forced job");
  for (const j of forced) await j?.remove();
});

test("a Retry of a lost job's run whose request was queued again is refused while that job waits (review helper-177)", async () => {
  // No worker runs: the job its request was queued again as waits.
  const again = await bed.trigger("flaky", { version: "f6" });
  const lost = { id: "run-lost-0000", data: { rebuild: "flaky", version: "f6" }, timestamp: Date.now() };
  const { runId } = await recordUnrunAttempt({ client: bed.main, keys: bed.keys, retention: DEFAULT_RETENTION }, lost, {
    attempt: 1,
    status: "failed",
    reason: `the job itself is gone from the queue's Redis: its request was queued again as job ${again}`,
  });
  await bed.main.set(bed.keys.requeuedAs(lost.id), again);
  try {
    const refused = await retryRun(deps(), { runId, actor: operator, reason: "looks lost" });
    assert.equal(refused.status, "job-pending", JSON.stringify(refused));
    assert.equal((refused as { queuedJobId: string }).queuedJobId, again);
  } finally {
    await (await bed.queue.getJob(again))?.remove();
  }
});

test("a request id whose job an operator cancelled is answered request-cancelled, not deduplicated with a job that will never run; nothing queued (black-box helper-178)", async () => {
  // No worker runs: the job waits, and its cancel removes it.
  const request = { version: "r9", requestId: "cancelled-0123456789" };
  const first = await triggerRebuild(bed.queue, bed.main, bed.keys, bed.definitions, "flaky", request);
  assert.equal(first.status, "queued", JSON.stringify(first));
  const { jobId } = first as { jobId: string };
  assert.equal((await cancelJob(deps(), { jobId, actor: operator, reason: "not this one" })).status, "removed");
  const resent = await triggerRebuild(bed.queue, bed.main, bed.keys, bed.definitions, "flaky", request);
  assert.equal(resent.status, "request-cancelled", JSON.stringify(resent));
  assert.equal((resent as { jobId: string }).jobId, jobId);
  assert.match((resent as { message: string }).message, /which an operator cancelled: nothing queued/);
  const waiting = (await bed.queue.getJobs(["waiting", "delayed", "prioritized"])).filter(
    (j) => j?.data.version === "r9",
  );
  assert.deepEqual(waiting, []);
});

test("a request id whose job finished before a cancel reached it is still answered deduplicated, not request-cancelled (review helper-179)", async () => {
  const worker = await bed.startWorker();
  try {
    const request = { version: "r10", requestId: "finished-0123456789" };
    const first = await triggerRebuild(bed.queue, bed.main, bed.keys, bed.definitions, "ticking", request);
    assert.equal(first.status, "queued", JSON.stringify(first));
    const { jobId } = first as { jobId: string };
    await until("the job ended", async () => ["completed", "failed"].includes(await bed.queue.getJobState(jobId)));
    // Removed since, as the retention of finished jobs removes them; then a cancel that came too
    // late: refused, but it writes its request for a gone job (cancel.ts: a lost job's would go on).
    await (await bed.queue.getJob(jobId))?.remove();
    assert.equal((await cancelJob(deps(), { jobId, actor: operator, reason: "too late" })).status, "finished");
    const resent = await triggerRebuild(bed.queue, bed.main, bed.keys, bed.definitions, "ticking", request);
    assert.deepEqual(resent, { status: "deduplicated", jobId });
  } finally {
    await worker.stop();
  }
});

test("a cancel of a waiting job that other requests joined says how many end with it: the answer, the audit and the run record (black-box helper-178)", async () => {
  // No worker runs: the first request waits, the next two join it.
  const first = await triggerRebuild(bed.queue, bed.main, bed.keys, bed.definitions, "flaky", { version: "j1" });
  assert.equal(first.status, "queued");
  const { jobId } = first as { jobId: string };
  for (let i = 0; i < 2; i++) {
    const joined = await triggerRebuild(bed.queue, bed.main, bed.keys, bed.definitions, "flaky", { version: "j1" });
    assert.deepEqual(joined, { status: "deduplicated", jobId });
  }
  const cancelled = await cancelJob(deps(), { jobId, actor: operator, reason: "not tonight" });
  assert.equal(cancelled.status, "removed");
  assert.equal(cancelled.joinedRequests, 2);
  const record = (await bed.runsOfJob(jobId))[0];
  assert.match(record?.reason ?? "", /; 2 other request\(s\) that had joined this job end with it$/);
  const audit = (await listAudit(bed.main, bed.keys, { limit: 20 })).entries.find(
    (e) => e.action === "cancel" && e.detail.jobId === jobId,
  );
  assert.equal(audit?.detail.joinedRequests, 2);
});

test("pause a schedule: nothing enqueued for two ticks, also after a worker restart, no missed tick; resume: the next tick runs", async () => {
  const tickRunsAfter = async (at: number) =>
    (await bed.allRuns()).filter((r) => (scheduledTickOf(r.jobId)?.tickAt ?? 0) > at && r.rebuild === "ticking");
  const queuedTicks = async () =>
    (await bed.queue.getJobs(["waiting", "delayed", "prioritized", "active"])).filter(
      (job) => scheduledTickOf(job?.id)?.schedulerId === "sched.ticking",
    );
  let worker = await bed.startWorker();
  try {
    await until("a scheduled run", async () => (await tickRunsAfter(0)).length > 0, 30_000);
    // Seen as missed unless paused: judged an hour from now (no run has started since the tick the
    // rule's grace before that: a run that started after a tick answers it), the scheduler having
    // "existed" long before.
    await bed.main.set(bed.keys.schedulerSince("sched.ticking"), String(Date.now() - 3_600_000));
    const later = { now: Date.now() + 3_600_000 };
    const missedBefore = await missedTickProblems(bed.main, bed.keys, bed.definitions, later);
    assert.ok(
      missedBefore.some((p) => p.includes("ticking")),
      JSON.stringify(missedBefore),
    );

    const paused = await changeSchedule(deps(), "pause", {
      rebuild: "ticking",
      actor: operator,
      reason: "maintenance",
    });
    assert.equal(paused.status, "done");
    const pausedAt = Date.now();
    assert.equal((await readSchedulePause(bed.main, bed.keys, "ticking", undefined))?.actor, operator);
    assert.deepEqual(await missedTickProblems(bed.main, bed.keys, bed.definitions, later), []);

    // Two ticks (4 s) and more: no job of the schedule is queued, no run of a later tick appears.
    await new Promise((r) => setTimeout(r, 2_500));
    await worker.stop();
    worker = await bed.startWorker(); // a restart upserts schedules: a paused one stays paused
    assert.match(worker.output(), /paused by an operator: sched\.ticking/);
    await new Promise((r) => setTimeout(r, 2_500));
    assert.deepEqual(await tickRunsAfter(pausedAt), []);
    assert.deepEqual(
      (await queuedTicks()).map((j) => j.id),
      [],
    );
    assert.deepEqual(
      (await bed.queue.getJobSchedulers(0, -1)).map((s) => s.key ?? s.id),
      [],
    );

    const resumed = await changeSchedule(deps(), "resume", { rebuild: "ticking", actor: operator, reason: "done" });
    assert.equal(resumed.status, "done");
    const resumedAt = Date.now();
    await until("a run of a tick after the resume", async () => (await tickRunsAfter(resumedAt)).length > 0, 20_000);
    assert.deepEqual(await missedTickProblems(bed.main, bed.keys, bed.definitions), []);
    const actions = (await listAudit(bed.main, bed.keys, { limit: 50 })).entries.map((e) => e.action);
    assert.ok(actions.includes("pause-schedule") && actions.includes("resume-schedule"));
  } finally {
    await worker.stop();
  }
});

test("with replicas asked for, two submits of one request id at once whose job a failover lost: one new job, both answered with it", async () => {
  const request = { version: "r-race", requestId: "form-race-0123456789" };
  const first = await triggerRebuild(bed.queue, bed.main, bed.keys, bed.definitions, "flaky", request);
  const lostId = (first as { jobId: string }).jobId;
  await bed.queue.remove(lostId); // the id kept, the job lost (as above)
  // Sent again twice at once (two tabs retrying after "not replicated"): the one that does not
  // rename the id is answered from it, before the "waiting trigger" marker is looked at.
  const answers = await Promise.all([
    triggerRebuild(bed.queue, bed.main, bed.keys, bed.definitions, "flaky", { ...request, replicas: 1 }),
    triggerRebuild(bed.queue, bed.main, bed.keys, bed.definitions, "flaky", { ...request, replicas: 1 }),
  ]);
  const named = answers.map((answer) => (answer as { jobId?: string }).jobId);
  assert.equal(named[0], named[1], `both answered with one job: ${JSON.stringify(answers)}`);
  assert.notEqual(named[0], lostId);
  const jobs = await bed.queue.getJobs(["waiting", "delayed", "prioritized", "active", "completed", "failed"]);
  const queued = jobs.filter((job) => job && job.data.version === "r-race").map((job) => job.id);
  assert.deepEqual(queued, [named[0]], "one job queued for the two submits");
});

test("one job per request id: a double submit of Rebuild now queues once; the same id for another request is refused, never answered with the first request's job", async () => {
  const request = { version: "r1", requestId: "form-0123456789" };
  const first = await triggerRebuild(bed.queue, bed.main, bed.keys, bed.definitions, "flaky", request);
  const second = await triggerRebuild(bed.queue, bed.main, bed.keys, bed.definitions, "flaky", request);
  assert.equal(first.status, "queued");
  assert.deepEqual(second, { status: "deduplicated", jobId: (first as { jobId: string }).jobId });
  const countJobs = async () => (await bed.queue.getJobs(["waiting", "delayed", "prioritized", "active"])).length;
  const before = await countJobs();
  // Another version, a forced run, another rebuild, a retry of a run: each another request.
  for (const [rebuild, changed] of [
    ["flaky", { ...request, version: "r2" }],
    ["flaky", { ...request, force: true }],
    ["ticking", request],
    ["flaky", { ...request, retryOf: "run-x-a1" }],
  ] as const) {
    const reused = await triggerRebuild(bed.queue, bed.main, bed.keys, bed.definitions, rebuild, changed);
    assert.equal(reused.status, "request-id-reused", JSON.stringify(reused));
    assert.match(
      (reused as { message: string }).message,
      /requestId 'form-0123456789' was used .* for another request/,
    );
  }
  assert.equal(await countJobs(), before, "nothing queued for them");
  const bad = await triggerRebuild(bed.queue, bed.main, bed.keys, bed.definitions, "flaky", { requestId: "a b" });
  assert.equal(bad.status, "invalid-request-id");
});

test("two different requests sent at once with one request id: one is queued, the other refused — never answered with the other's job", async () => {
  for (let round = 0; round < 5; round++) {
    const requestId = `form-both-${round}-0123456789`;
    const answers = await Promise.all([
      triggerRebuild(bed.queue, bed.main, bed.keys, bed.definitions, "flaky", { version: `both-a${round}`, requestId }),
      triggerRebuild(bed.queue, bed.main, bed.keys, bed.definitions, "flaky", { version: `both-b${round}`, requestId }),
    ]);
    const statuses = answers.map((answer) => answer.status).sort();
    assert.deepEqual(statuses, ["queued", "request-id-reused"], JSON.stringify(answers));
  }
});

test("a request id stored by an earlier version (no fingerprint beside it) is taken as this request: a resend during a rolling deploy answers with its job", async () => {
  const request = { version: "r-old", requestId: "form-old-0123456789" };
  const first = await triggerRebuild(bed.queue, bed.main, bed.keys, bed.definitions, "flaky", request);
  const jobId = (first as { jobId: string }).jobId;
  const keysNamingIt: string[] = [];
  for (const key of await bed.main.keys(bed.keys.triggerRequest("*"))) {
    if ((await bed.main.get(key)) === jobId) keysNamingIt.push(key);
  }
  assert.equal(keysNamingIt.length, 1, "its id names the bare job id (as earlier versions read it)");
  const hash = keysNamingIt[0]!.slice(bed.keys.triggerRequest("").length);
  assert.equal(await bed.main.del(bed.keys.triggerRequestWhat(hash)), 1, "a fingerprint beside it");
  const again = await triggerRebuild(bed.queue, bed.main, bed.keys, bed.definitions, "flaky", request);
  assert.deepEqual(again, { status: "deduplicated", jobId });
});

test("with replicas asked for, a request id whose job is gone (a failover kept the id, lost the job) queues again, never answers with a job that does not exist", async () => {
  const request = { version: "r-lost", requestId: "form-lost-0123456789" };
  const first = await triggerRebuild(bed.queue, bed.main, bed.keys, bed.definitions, "flaky", request);
  assert.equal(first.status, "queued");
  const lostId = (first as { jobId: string }).jobId;
  await bed.queue.remove(lostId); // what a promoted replica that missed the add holds: the id, no job
  assert.equal(await bed.queue.getJobState(lostId), "unknown");
  // Sent again as after "not replicated" (replicas asked for; this Redis has none, so the answer
  // is not-replicated again — but it names a new job, which exists).
  const again = await triggerRebuild(bed.queue, bed.main, bed.keys, bed.definitions, "flaky", {
    ...request,
    replicas: 1,
  });
  assert.equal(again.status, "not-replicated", JSON.stringify(again));
  const jobId = (again as { jobId: string }).jobId;
  assert.notEqual(jobId, lostId);
  assert.notEqual(await bed.queue.getJobState(jobId), "unknown", "the job it names exists");
  const third = await triggerRebuild(bed.queue, bed.main, bed.keys, bed.definitions, "flaky", request);
  assert.deepEqual(third, { status: "deduplicated", jobId }, "and the id now names it");
});

test("a trigger that folds into a waiting job of the same request marks the job as asked for again (a run of it that published before, the queue's Redis having lost its completion, does not end it unpublished)", async (t) => {
  // A queue no worker reads: the first job stays waiting.
  const keys = redisKeys(`fold-${Date.now().toString(36)}`);
  const queue = new Queue(REBUILD_QUEUE, { connection: bed.main, prefix: queuePrefix(keys) });
  t.after(() => queue.close());
  const first = await triggerRebuild(queue, bed.main, keys, bed.definitions, "flaky", { version: "f1" });
  assert.equal(first.status, "queued");
  const jobId = (first as { jobId: string }).jobId;
  assert.equal(await bed.main.exists(keys.askedAgain(jobId)), 0, "asked once: no mark");
  const second = await triggerRebuild(queue, bed.main, keys, bed.definitions, "flaky", { version: "f1" });
  assert.deepEqual(second, { status: "deduplicated", jobId });
  assert.equal(await bed.main.exists(keys.askedAgain(jobId)), 1);
  // Another version is another request: its own job.
  const other = await triggerRebuild(queue, bed.main, keys, bed.definitions, "flaky", { version: "f2" });
  assert.equal(other.status, "queued");
  assert.equal(await bed.main.exists(keys.askedAgain((other as { jobId: string }).jobId)), 0);
});
