/**
 * Killed workers (SIGKILL), from the seeds' "a dead worker must not lose the work": a dead
 * holder's claim lives at most its TTL; a worker running two rebuilds killed; a job whose worker
 * is killed twice (its redelivery too). Real worker processes on a real Redis.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { claimName } from "../../lib/claims";
import { createTestBed, slowStep, type TestBed } from "../support/stack";
import { until } from "../support/until";

let bed: TestBed;
before(async () => {
  const slow = (output: string) => ({
    output,
    claim: { ttl: "2s", refreshEvery: "500ms" },
    timeLimit: "2m",
    retries: { attempts: 3, backoff: "200ms", maxBackoff: "1s" },
    steps: [slowStep(3)],
  });
  bed = await createTestBed({ slow: slow("out/slow"), slow2: slow("out/slow2") });
});
after(() => bed.close());

test("a SIGKILLed holder's claim lives at most its TTL (refreshes never extend it further); then another job is granted it and rebuilds", async () => {
  const name = claimName(bed.definitions.rebuilds.get("slow")!.claimPath);
  const ttlMs = 2_000;
  const victim = await bed.startWorker();
  const jobId = await bed.trigger("slow", { version: "v-expire" });
  await bed.waitForRun((r) => r.jobId === jobId && r.status === "running" && r.fence !== null, 15_000);
  const ttls: number[] = [];
  const sample = async () => {
    const pttl = await bed.claims.pttl(bed.keys.claim(name));
    if (pttl > 0) ttls.push(pttl);
    return pttl;
  };
  // While it refreshes (every 500 ms), and after the kill until the claim is gone.
  for (let i = 0; i < 10; i++) {
    await sample();
    await new Promise((r) => setTimeout(r, 100));
  }
  assert.equal(await victim.stop("SIGKILL"), null);
  await until("the dead holder's claim expired", async () => (await sample()) === -2, 15_000);
  assert.ok(ttls.length >= 5, `sampled the claim (${ttls.length})`);
  assert.ok(Math.max(...ttls) <= ttlMs, `no refresh set more than the TTL: ${Math.max(...ttls)} ms`);

  const other = await bed.startWorker();
  try {
    const next = await bed.trigger("slow", { version: "v-expire-2" });
    const rebuilt = await bed.waitForRun((r) => r.jobId === next && r.status === "rebuilt", 40_000);
    assert.ok(rebuilt.fence !== null && rebuilt.fence > 0, "granted the freed claim");
    // The killed job is redelivered and finished too.
    await bed.waitForRun((r) => r.jobId === jobId && r.status === "rebuilt", 40_000, "the killed job rebuilt");
  } finally {
    await other.stop();
  }
});

test("SIGKILL of a worker running two rebuilds: both are rebuilt elsewhere and no record is left running", async () => {
  const victim = await bed.startWorker();
  const jobs = [await bed.trigger("slow", { version: "v-two" }), await bed.trigger("slow2", { version: "v-two" })];
  for (const jobId of jobs)
    await bed.waitForRun((r) => r.jobId === jobId && r.status === "running" && r.fence !== null, 15_000);
  // Killed while its 3 s steps run (a survivor started first could take longer than that under load).
  assert.equal(await victim.stop("SIGKILL"), null);
  const survivor = await bed.startWorker();
  try {
    for (const jobId of jobs) {
      const done = await bed.waitForRun((r) => r.jobId === jobId && r.status === "rebuilt", 60_000);
      assert.ok(done.attempt > 1, "by a later attempt");
      await until(
        `job ${jobId}: every attempt's record final`,
        async () => (await bed.runsOfJob(jobId)).every((r) => r.status !== "running" && r.status !== "queued"),
        20_000,
      );
      assert.ok(
        (await bed.runsOfJob(jobId)).some((r) => r.status === "aborted"),
        "the killed attempt is closed aborted",
      );
    }
  } finally {
    await survivor.stop();
  }
});

test("a rebuild whose worker is SIGKILLed twice (its redelivery too) is still rebuilt, not failed", async () => {
  const workers = [await bed.startWorker()];
  const jobId = await bed.trigger("slow", { version: "v-twice" });
  try {
    for (let kill = 1; kill <= 2; kill++) {
      const running = await bed.waitForRun(
        (r) => r.jobId === jobId && r.status === "running" && r.fence !== null && r.attempt >= kill,
        40_000,
        `attempt running before kill ${kill}`,
      );
      const victim = workers.find((w) => running.workerId?.includes(`-${w.pid}-`));
      assert.ok(victim, `the running record names a live worker (${running.workerId})`);
      // Killed at once (its step takes 3 s), then the next worker started: started first, under
      // load its start outlasted the step and the attempt it was to kill had rebuilt.
      assert.equal(await victim.stop("SIGKILL"), null);
      workers.splice(workers.indexOf(victim), 1);
      workers.push(await bed.startWorker());
    }
    const done = await bed.waitForRun((r) => r.jobId === jobId && r.status === "rebuilt", 60_000);
    assert.ok(done.attempt >= 3, `rebuilt by attempt ${done.attempt}`);
    await until("the job completed", async () => (await bed.queue.getJobState(jobId)) === "completed", 15_000);
  } finally {
    for (const worker of workers) await worker.stop();
  }
});
