/**
 * A main Redis that refused writes for longer than the heartbeat TTL (down, failing over, a
 * primary without its replicas answering NOREPLICAS) let every worker's heartbeat expire, live or
 * not. The first worker to write again must not take that for death: it judges another worker
 * dead only once its own beats have held for a whole TTL (BEAT_STREAK, lib/workers/heartbeat.ts).
 * The soak's Sentinel mode found it: a worker that came back first closed a live worker's run as
 * abandoned ("stopped beating") while that run's steps went on (escaped=5).
 *
 * Real processes: a worker holding a claim (claims on a Redis of their own, which stays
 * writable) runs a long step; the main Redis refuses every write for 17 s
 * (`min-replicas-to-write 1` with no replica: NOREPLICAS); the holder's heartbeat expires; writes
 * come back and a second worker starts at once — its start-up sweep is the first writer (the
 * holder is stopped for the first 2.5 s of it, so that it surely is).
 *
 * Can it fail? Without the streak (`judgesOthers` ignored) the new worker closed the holder's
 * run "stopped beating" (before the holder was held back, in 1 of 3 runs: the holder's next beat
 * often came first).
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { startTestRedis, type TestRedis } from "../support/redis";
import { createTestBed, type TestBed } from "../support/stack";
import { until } from "../support/until";

let bed: TestBed;
let claimsRedis: TestRedis;
let workerEnv: Record<string, string>;

before(async () => {
  claimsRedis = await startTestRedis();
  bed = await createTestBed({
    slow: {
      output: "out/slow",
      claim: { ttl: "4s", refreshEvery: "1s" },
      timeLimit: "5m",
      steps: [{ name: "work", run: ["sh", "-c", "sleep 60"], killGrace: "500ms" }],
    },
  });
  workerEnv = { CLAIMS_REDIS_URL: claimsRedis.url };
});
after(async () => {
  await bed?.close();
});

test("after a write outage longer than the heartbeat TTL, the first worker to write again does not close a live worker's run", async () => {
  const holder = await bed.startWorker(workerEnv);
  let sweeper: Awaited<ReturnType<TestBed["startWorker"]>> | undefined;
  const admin = bed.main.duplicate();
  try {
    const jobId = await bed.trigger("slow", { version: "v-outage" });
    const run = await bed.waitForRun((r) => r.jobId === jobId && r.status === "running" && r.fence !== null, 30_000);
    await bed.queue.pause(); // nothing picks the job up again: the record has one attempt
    const heartbeat = bed.keys.workerHeartbeat(run.workerId!);
    assert.equal(await admin.exists(heartbeat), 1, "the holder beats");

    await admin.config("SET", "min-replicas-to-write", "1");
    try {
      await until(
        "the holder's heartbeat expired during the outage",
        async () => (await admin.exists(heartbeat)) === 0,
        30_000,
      );
      assert.match(
        await admin.set(`${bed.keys.tag}:probe`, "x").catch((error: Error) => error.message),
        /NOREPLICAS/,
        "the main Redis refuses writes",
      );
      // The holder is held back 2.5 s as writes return (a busy event loop, a slow host): the new
      // worker's start-up sweep then surely writes first. Its claim (4 s TTL) outlives that.
      process.kill(holder.pid, "SIGSTOP");
    } finally {
      await admin.config("SET", "min-replicas-to-write", "0");
    }
    const resumeHolder = setTimeout(() => process.kill(holder.pid, "SIGCONT"), 2_500);
    try {
      sweeper = await bed.startWorker(workerEnv);
    } finally {
      await new Promise((resolve) => setTimeout(resolve, 2_600));
      clearTimeout(resumeHolder);
      process.kill(holder.pid, "SIGCONT");
    }

    // The holder beats again within an interval; the new worker's first sweeps must leave its run.
    await until("the holder beats again", async () => (await admin.exists(heartbeat)) === 1, 15_000);
    await new Promise((resolve) => setTimeout(resolve, 3_000));
    const now = (await bed.runsOfJob(jobId)).find((r) => r.id === run.id)!;
    assert.doesNotMatch(now.reason ?? "", /stopped beating/, `${now.status}: ${now.reason}`);
    assert.doesNotMatch(sweeper.output(), new RegExp(`closed abandoned run ${run.id}`), sweeper.output());
  } finally {
    admin.disconnect();
    await sweeper?.stop();
    await holder.stop();
  }
});
