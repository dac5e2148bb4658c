/**
 * The queue's Redis loses a job while a worker runs it (black-box helper-151: a restart from an
 * older snapshot, or a failover to a replica that had not received it). Its record used to say
 * "the job is redelivered" while nothing would ever run it again: the request was lost unseen.
 * The worker now looks the job up when it loses its lock (and before it defers, hands back or
 * retries one): gone, its request is queued again and its record says so. A real redis-server
 * really killed and restarted from its snapshot, a real worker process.
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, test } from "node:test";
import { cancelJob } from "../../lib/operations/cancel";
import { jobLockKey } from "../../lib/rebuilds/queue";
import { startRedisServer, type RedisServerHandle } from "../../lib/redis/embedded";
import { createTestBed, slowStep, type TestBed } from "../support/stack";
import { until } from "../support/until";

const RDB_ONLY = ["--appendonly", "no", "--save", ""];
const root = fs.mkdtempSync(path.join(os.tmpdir(), "claimwatch-lostjob-"));
const servers: RedisServerHandle[] = [];
const beds: TestBed[] = [];
after(async () => {
  for (const bed of beds) await bed.close().catch(() => {});
  for (const server of servers) await server.stop(2_000).catch(() => {});
  fs.rmSync(root, { recursive: true, force: true });
});

/**
 * A bed on its own RDB-only redis-server in `dir` (`slow`: one 6 s step), a worker, and the
 * snapshot a restart comes back to, taken before any job exists.
 */
async function snapshotBed(dir: string, slow: Record<string, unknown> = {}) {
  const first = await startRedisServer({ dir, extraArgs: RDB_ONLY });
  servers.push(first);
  const bed = await createTestBed(
    { slow: { output: "out/slow", steps: [slowStep(6)], ...slow } },
    {},
    { redis: { ...first, dir }, url: first.url },
  );
  beds.push(bed);
  const worker = await bed.startWorker();
  await bed.main.save();
  return { first, bed, worker };
}

/** A crash (SIGKILL: no shutdown save), once the server has exited. */
async function crash(server: RedisServerHandle): Promise<void> {
  process.kill(server.pid, "SIGKILL");
  await new Promise<void>((resolve) =>
    server.child.exitCode !== null || server.child.signalCode !== null
      ? resolve()
      : server.child.once("exit", () => resolve()),
  );
}

/** The server again on the same port and data. */
async function restart(server: RedisServerHandle, dir: string): Promise<void> {
  servers.push(await startRedisServer({ dir, port: server.port, extraArgs: RDB_ONLY }));
}

/** A crash, then the server again on the same port and data. */
async function crashAndRestart(server: RedisServerHandle, dir: string): Promise<void> {
  await crash(server);
  await restart(server, dir);
}

test("a job the queue's Redis lost while it ran: its record says so, and its request is queued again and rebuilt", async () => {
  const dir = path.join(root, "redis");
  const { first, bed, worker } = await snapshotBed(dir);
  const jobId = await bed.trigger("slow", { version: "v1" });
  await bed.waitForRun((r) => r.jobId === jobId && r.status === "running", 30_000, "the job running");

  // A crash (no shutdown save), then the server again on the same port and data: the job is gone.
  await crashAndRestart(first, dir);

  const ended = await bed.waitForRun(
    (r) => r.jobId === jobId && r.status !== "running",
    60_000,
    "the lost job's attempt ended",
  );
  // How the attempt learns it: its job lock lost, or first its claim (the claims Redis is DB 1 of
  // the same server); either way its worker queues the request again and says so.
  await worker.waitFor(new RegExp(`job ${jobId}: gone from the queue's Redis`), 30_000);
  const again = new RegExp(`job ${jobId}: gone from the queue's Redis.*queued again as job (run-[0-9a-f-]+)`).exec(
    worker.output(),
  )?.[1];
  assert.ok(again, worker.output());
  assert.notEqual(again, jobId);
  assert.doesNotMatch(ended.reason ?? "", /the job is redelivered/, `${ended.status} ${ended.reason}`);
  // Either way its record names the job its request went to (black-box helper-174: a claim lost
  // first left "deferred, the request is kept", naming no job).
  assert.match(ended.reason ?? "", new RegExp(`its request was queued again as job ${again}`), ended.reason ?? "");
  const rebuilt = await bed.waitForRun(
    (r) => r.jobId === again && r.status === "rebuilt",
    90_000,
    "the request rebuilt",
  );
  assert.equal(rebuilt.version, "v1");
  assert.match(worker.output(), new RegExp(`job ${jobId}: gone from the queue's Redis`));
  await worker.stop();
});

test("a job the queue's Redis lost with its claim, the claim's loss seen first: its record names the job its request was queued again as (black-box helper-174: 'deferred, the request is kept', naming none)", async () => {
  const dir = path.join(root, "redis-claim-first");
  // Refreshed every 300 ms: the claim's loss is seen before the job lock's renewal (~1.25 s).
  const { first, bed, worker } = await snapshotBed(dir, { claim: { ttl: "2s", refreshEvery: "300ms" } });
  const jobId = await bed.trigger("slow", { version: "v3" });
  await bed.waitForRun((r) => r.jobId === jobId && r.status === "running", 30_000, "the job running");
  await crashAndRestart(first, dir);

  const ended = await bed.waitForRun((r) => r.jobId === jobId && r.status !== "running", 60_000, "its record");
  await worker.waitFor(new RegExp(`job ${jobId}: gone from the queue's Redis`), 30_000);
  const again = new RegExp(`job ${jobId}: gone from the queue's Redis.*queued again as job (run-[0-9a-f-]+)`).exec(
    worker.output(),
  )?.[1];
  assert.ok(again, worker.output());
  assert.match(ended.reason ?? "", new RegExp(`its request was queued again as job ${again}`), ended.reason ?? "");
  await bed.waitForRun((r) => r.jobId === again && r.status === "rebuilt", 90_000, "the request rebuilt");
  await worker.stop();
});

test("a deploy while the queue's Redis restarts without the running job: nothing to hand back, so its request is queued again and its record says so (black-box helper-174)", async () => {
  const dir = path.join(root, "redis-deploy");
  const { first, bed, worker } = await snapshotBed(dir);
  const jobId = await bed.trigger("slow", { version: "v2" });
  await bed.waitForRun((r) => r.jobId === jobId && r.status === "running", 30_000, "the job running");

  // The crash, and the deploy's SIGTERM while the server is down; then the server again on its
  // snapshot from before the job.
  await crash(first);
  const stopped = worker.stop("SIGTERM");
  await new Promise((r) => setTimeout(r, 1_500));
  await restart(first, dir);
  await stopped;

  const ended = await bed.waitForRun((r) => r.jobId === jobId && r.status !== "running", 30_000, "its record");
  const again = /its request was queued again as job (run-[0-9a-f-]+)/.exec(ended.reason ?? "")?.[1];
  assert.ok(again, `${ended.status}: ${ended.reason}\n${worker.output()}`);
  assert.doesNotMatch(ended.reason ?? "", /job handed back to the queue/);
  assert.ok(await bed.queue.getJob(again), "the request's new job is in the queue");

  // The next worker (the deploy's new one) builds it.
  const next = await bed.startWorker();
  try {
    const rebuilt = await bed.waitForRun(
      (r) => r.jobId === again && r.status === "rebuilt",
      90_000,
      "the request rebuilt",
    );
    assert.equal(rebuilt.version, "v2");
  } finally {
    await next.stop();
  }
});

test("a job whose lock its worker lost and that an operator then cancelled (removed from the queue) is not queued again (review helper-155)", async () => {
  // A step that ignores SIGTERM: the attempt that lost its lock waits out its kill grace, while the
  // stalled check gives the job back and the operator's cancel removes it.
  const stubborn = {
    name: "stubborn",
    // Its shell ignores SIGTERM; each short sleep the group's SIGTERM ends is followed by another.
    run: ["sh", "-c", "trap '' TERM; i=0; while [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done"],
    killGrace: "8s",
  };
  const bed = await createTestBed({ stubborn: { output: "out/stubborn", steps: [stubborn] } });
  beds.push(bed);
  // One job at a time: the job given back is not picked up again beside its stale pickup.
  const worker = await bed.startWorker({ CLAIMWATCH_WORKER_CONCURRENCY: "1" });
  const jobId = await bed.trigger("stubborn", { version: "v1" });
  await bed.waitForRun((r) => r.jobId === jobId && r.status === "running" && r.fence !== null, 30_000, "running");
  await bed.main.del(jobLockKey(bed.keys, jobId)); // as after a pause past the lock, or a failover
  await until(
    "the stalled check gave the job back",
    async () => {
      const state = await bed.queue.getJobState(jobId);
      return state === "waiting" || state === "delayed" || state === "prioritized";
    },
    30_000,
  );
  const cancelled = await cancelJob(
    { queue: bed.queue, main: bed.main, keys: bed.keys },
    { jobId, actor: "ops", reason: "not wanted" },
  );
  assert.equal(cancelled.status, "removed", JSON.stringify(cancelled));
  // The stale pickup ends once its step is killed (its kill grace): then it looks the job up.
  await worker.waitFor(new RegExp(`job ${jobId}: (transient failure|failed)`), 60_000);
  assert.doesNotMatch(worker.output(), /gone from the queue's Redis/);
  const first = (await bed.runsOfJob(jobId)).find((r) => r.attempt === 1);
  assert.doesNotMatch(first?.reason ?? "", /queued again|joined waiting job/, first?.reason ?? "");
  const others = (await bed.allRuns()).filter((r) => r.jobId !== jobId);
  assert.deepEqual(others, [], "no other job ran");
  assert.deepEqual(await bed.queue.getJobCounts("waiting", "delayed", "active", "prioritized"), {
    waiting: 0,
    delayed: 0,
    active: 0,
    prioritized: 0,
  });
  await worker.stop();
});

test("an operator's cancel of a job the queue's Redis lost while its worker was stopped: not queued again when the worker wakes (black-box helper-157)", async () => {
  const dir = path.join(root, "redis-cancel");
  const { first, bed, worker } = await snapshotBed(dir);
  const jobId = await bed.trigger("slow", { version: "v1", force: true });
  await bed.waitForRun((r) => r.jobId === jobId && r.status === "running", 30_000, "the job running");
  process.kill(worker.pid, "SIGSTOP");
  try {
    await crashAndRestart(first, dir);
    // The job and its record are gone: the cancel finds nothing, but leaves its request (and says so).
    const cancelled = await cancelJob(
      { queue: bed.queue, main: bed.main, keys: bed.keys },
      { jobId, actor: "ops", reason: "stop it now" },
    );
    assert.equal(cancelled.status, "not-found", JSON.stringify(cancelled));
    assert.equal("requestKept" in cancelled && cancelled.requestKept, true);
  } finally {
    process.kill(worker.pid, "SIGCONT");
  }
  await worker.waitFor(new RegExp(`job ${jobId}: .*(cancel|transient failure|failed)`), 60_000);
  await new Promise((r) => setTimeout(r, 3_000));
  assert.doesNotMatch(worker.output(), /gone from the queue's Redis/);
  assert.deepEqual(
    (await bed.allRuns()).filter((r) => r.jobId !== jobId),
    [],
    "no other job ran",
  );
  await worker.stop();
});

test("a cancel of a job the queue lost while its record still says running answers cancelling, and the worker records the run cancelled (review helper-159)", async () => {
  const dir = path.join(root, "redis-cancel-running");
  const { bed, worker } = await snapshotBed(dir);
  const jobId = await bed.trigger("slow", { version: "v1", force: true });
  const running = await bed.waitForRun((r) => r.jobId === jobId && r.status === "running", 30_000, "running");
  process.kill(worker.pid, "SIGSTOP");
  let cancelled;
  try {
    // Only the job lost (a replica that had the record, not the job): gone from the queue.
    await bed.main.del(bed.queue.toKey(jobId), jobLockKey(bed.keys, jobId));
    await bed.main.lrem(bed.queue.toKey("active"), 0, jobId);
    assert.equal(await bed.queue.getJob(jobId), undefined);
    cancelled = await cancelJob(
      { queue: bed.queue, main: bed.main, keys: bed.keys },
      { jobId, actor: "ops", reason: "stop it now" },
    );
  } finally {
    process.kill(worker.pid, "SIGCONT");
  }
  assert.deepEqual([cancelled.status, "runId" in cancelled && cancelled.runId], ["cancelling", running.id]);
  const ended = await bed.waitForRun((r) => r.id === running.id && r.status !== "running", 60_000, "the run ended");
  assert.equal(ended.status, "cancelled", `${ended.status}: ${ended.reason}`);
  await new Promise((r) => setTimeout(r, 2_000));
  assert.deepEqual(
    (await bed.allRuns()).filter((r) => r.jobId !== jobId),
    [],
    "its request was not queued again",
  );
  await worker.stop();
});

test("a cancel of a lost job's id follows its request to the job it was queued again as (review helper-164)", async () => {
  const dir = path.join(root, "redis-follow");
  const { first, bed, worker } = await snapshotBed(dir);
  const jobId = await bed.trigger("slow", { version: "v1" });
  await bed.waitForRun((r) => r.jobId === jobId && r.status === "running", 30_000, "the job running");
  await crashAndRestart(first, dir);
  await worker.waitFor(new RegExp(`job ${jobId}: gone from the queue's Redis.*queued again as job run-`), 60_000);
  const again = new RegExp(`job ${jobId}: gone from the queue's Redis.*queued again as job (run-[0-9a-f-]+)`).exec(
    worker.output(),
  )![1]!;
  // The operator cancels the job id they saw.
  const cancelled = await cancelJob(
    { queue: bed.queue, main: bed.main, keys: bed.keys },
    { jobId, actor: "ops", reason: "stop it now" },
  );
  assert.equal(cancelled.requeuedFrom, jobId, JSON.stringify(cancelled));
  assert.equal(cancelled.jobId, again);
  assert.ok(["removed", "cancelling"].includes(cancelled.status), JSON.stringify(cancelled));
  await bed.waitForRun((r) => r.jobId === again && r.status === "cancelled", 60_000, "the requeued job cancelled");
  await new Promise((r) => setTimeout(r, 2_000));
  assert.deepEqual(
    (await bed.allRuns()).filter((r) => r.jobId === again && r.status === "rebuilt"),
    [],
    "the request it became was not rebuilt",
  );
  await worker.stop();
});

test("a cancel of a lost job whose running record's worker is dead answers abandoned (nothing runs it), the request kept (review helper-164)", async () => {
  const dir = path.join(root, "redis-abandoned");
  const { bed, worker } = await snapshotBed(dir);
  const jobId = await bed.trigger("slow", { version: "v1", force: true });
  const running = await bed.waitForRun((r) => r.jobId === jobId && r.status === "running", 30_000, "running");
  await worker.stop("SIGKILL");
  // Only the job lost (a replica that had the record, not the job).
  await bed.main.del(bed.queue.toKey(jobId), jobLockKey(bed.keys, jobId));
  await bed.main.lrem(bed.queue.toKey("active"), 0, jobId);
  await until(
    "the dead worker's heartbeat to expire",
    async () => {
      const { liveWorkerIdSet } = await import("../../lib/workers/heartbeat");
      return (await liveWorkerIdSet(bed.main, bed.keys)).size === 0;
    },
    30_000,
  );
  const cancelled = await cancelJob(
    { queue: bed.queue, main: bed.main, keys: bed.keys },
    { jobId, actor: "ops", reason: "stop it now" },
  );
  assert.deepEqual([cancelled.status, "runId" in cancelled && cancelled.runId], ["abandoned", running.id]);
  assert.ok(await bed.main.exists(bed.keys.cancelRequest(jobId)), "the request is kept");
});
