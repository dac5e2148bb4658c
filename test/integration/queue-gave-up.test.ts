/**
 * A job whose pickups are lost again and again (its worker killed each time): BullMQ fails it at
 * its next pickup without running it (its stall limit). That attempt's record says so, failed,
 * and the run can be retried (black-box helper-167: the history ended on an attempt that said
 * "aborted" or "deferred, the request is kept", nothing said the job was given up, and Retry
 * refused it). Real workers, killed with SIGKILL; a real redis-server.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { retryRun } from "../../lib/operations/retry";
import { createTestBed, type TestBed } from "../support/stack";

let bed: TestBed;
before(async () => {
  bed = await createTestBed({
    long: {
      output: "out/long",
      claim: { ttl: "3s", refreshEvery: "1s" },
      steps: [{ name: "wait", run: ["sh", "-c", "sleep 120"] }],
    },
  });
});
after(() => bed.close());

test("a job whose worker is killed at each of its pickups, past BullMQ's stall limit: its last attempt is recorded failed, saying the queue gave it up, and it can be retried", async () => {
  const jobId = await bed.trigger("long", { version: "v1" });
  // Six pickups, each lost (BullMQ fails the job at the seventh, after five stalls allowed).
  for (let attempt = 1; attempt <= 6; attempt++) {
    const worker = await bed.startWorker();
    try {
      await bed.waitForRun(
        (r) => r.jobId === jobId && r.attempt === attempt && r.status === "running",
        60_000,
        `attempt ${attempt} running`,
      );
    } finally {
      await worker.stop("SIGKILL");
    }
  }
  const worker = await bed.startWorker();
  try {
    const given = await bed.waitForRun(
      (r) => r.jobId === jobId && r.status === "failed",
      90_000,
      "the job's failed record",
    );
    assert.equal(given.attempt, 7, JSON.stringify(given));
    assert.match(
      given.reason ?? "",
      /the queue gave this job up at its pickup 7: its pickups were lost 6 times .*; its request was not served: retry this run/,
    );
    assert.equal(given.version, "v1");
    assert.equal(await bed.queue.getJobState(jobId), "failed");
    // Every earlier attempt ended (closed aborted by the next one's begin or the sweep).
    const runs = await bed.runsOfJob(jobId);
    assert.deepEqual(
      runs.map((r) => r.attempt).sort((a, b) => a - b),
      [1, 2, 3, 4, 5, 6, 7],
    );
    assert.ok(
      runs.filter((r) => r.attempt < 7).every((r) => r.status === "aborted"),
      runs.map((r) => `${r.attempt}:${r.status}`).join(" "),
    );
    const retried = await retryRun(
      { queue: bed.queue, main: bed.main, keys: bed.keys, definitions: bed.definitions },
      { runId: given.id, actor: "operator", reason: "the workers are stable again" },
    );
    assert.equal(retried.status, "queued", JSON.stringify(retried));
  } finally {
    await worker.stop("SIGKILL");
  }
});
