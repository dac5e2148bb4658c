/** Retries only for transient failures, with the configured (capped) backoff; a failure never clears another run's idempotency key. */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { idempotencyKey } from "../../lib/rebuilds/version";
import { createTestBed, type TestBed } from "../support/stack";
import { until } from "../support/until";

let bed: TestBed;
before(async () => {
  bed = await createTestBed({
    flaky: {
      output: "out/flaky",
      claim: { ttl: "4s", refreshEvery: "1s" },
      timeLimit: "1m",
      retries: { attempts: 3, backoff: "700ms", maxBackoff: "5s" },
      steps: [
        {
          name: "flaky",
          // Fails with the declared transient code 75 when the marker file for this version is missing.
          run: [
            "sh",
            "-c",
            'm="$0/marker-$CLAIMWATCH_VERSION"; if [ ! -f "$m" ]; then touch "$m"; exit 75; fi; echo ok > "$CLAIMWATCH_WORK/out"',
            "{output}",
          ],
          transientExitCodes: [75],
        },
      ],
    },
    broken: {
      output: "out/broken",
      claim: { ttl: "4s", refreshEvery: "1s" },
      timeLimit: "1m",
      retries: { attempts: 3, backoff: "200ms", maxBackoff: "1s" },
      steps: [{ name: "fail", run: ["sh", "-c", "echo broken >&2; exit 3"] }],
    },
    // Fails with 75 its first four attempts (a line per attempt in {output}/attempts), then succeeds.
    doubling: {
      output: "out/doubling",
      claim: { ttl: "4s", refreshEvery: "1s" },
      timeLimit: "1m",
      retries: { attempts: 6, backoff: "400ms", maxBackoff: "1s" },
      steps: [
        {
          name: "flaky",
          run: [
            "sh",
            "-c",
            'echo x >> "$0/attempts"; if [ "$(wc -l < "$0/attempts")" -le 4 ]; then exit 75; fi; echo ok > "$CLAIMWATCH_WORK/out"',
            "{output}",
          ],
          transientExitCodes: [75],
        },
      ],
    },
    // Always fails transiently: its retries must stop at its attempts.
    hopeless: {
      output: "out/hopeless",
      claim: { ttl: "4s", refreshEvery: "1s" },
      timeLimit: "1m",
      retries: { attempts: 3, backoff: "100ms", maxBackoff: "200ms" },
      steps: [{ name: "flaky", run: ["sh", "-c", "exit 75"], transientExitCodes: [75] }],
    },
    toggled: {
      output: "out/toggled",
      claim: { ttl: "4s", refreshEvery: "1s" },
      timeLimit: "1m",
      retries: { attempts: 1, backoff: "200ms", maxBackoff: "1s" },
      // Fails while the file {output}/fail exists.
      steps: [
        {
          name: "maybe",
          run: ["sh", "-c", 'if [ -f "$0/fail" ]; then exit 9; fi; echo ok > "$CLAIMWATCH_WORK/out"', "{output}"],
        },
      ],
    },
  });
});
after(() => bed.close());

test("a transient failure on the first attempt is retried after the configured backoff and succeeds", async () => {
  const fs = await import("node:fs");
  fs.mkdirSync(bed.definitions.rebuilds.get("flaky")!.outputPath, { recursive: true });
  const worker = await bed.startWorker();
  try {
    const jobId = await bed.trigger("flaky", { version: "t1" });
    const done = await bed.waitForRun((r) => r.jobId === jobId && r.status === "rebuilt", 20_000);
    const runs = await bed.runsOfJob(jobId);
    assert.deepEqual(
      runs.map((r) => [r.attempt, r.status]),
      [
        [1, "failed"],
        [2, "rebuilt"],
      ],
    );
    assert.match(runs[0]!.reason ?? "", /^transient: step flaky exited 75/);
    assert.ok(done.startedAt! - runs[0]!.finishedAt! >= 700 - 50, "waited at least the configured backoff");
    // The final record is written before BullMQ completes the job (and counts the attempt).
    await until("the job completed", async () => (await bed.queue.getJobState(jobId)) === "completed", 10_000);
    const job = await bed.queue.getJob(jobId);
    assert.equal(job?.attemptsMade, 2);
  } finally {
    await worker.stop();
  }
});

test("retries wait the backoff doubled each time, up to the cap (not a fixed delay, not uncapped)", async () => {
  const fs = await import("node:fs");
  fs.mkdirSync(bed.definitions.rebuilds.get("doubling")!.outputPath, { recursive: true });
  const worker = await bed.startWorker();
  try {
    const jobId = await bed.trigger("doubling", { version: "d1" });
    await bed.waitForRun((r) => r.jobId === jobId && r.status === "rebuilt", 40_000);
    const runs = await bed.runsOfJob(jobId);
    assert.deepEqual(
      runs.map((r) => r.status),
      ["failed", "failed", "failed", "failed", "rebuilt"],
    );
    const gaps = runs.slice(1).map((run, i) => run.startedAt! - runs[i]!.finishedAt!);
    // 400, 800, then the 1 s cap twice (uncapped it would be 1.6 s and 3.2 s). A gap may be
    // longer than its backoff by the pickup's delay, never shorter.
    const slack = 50;
    assert.ok(gaps[0]! >= 400 - slack, `first gap ${gaps[0]} ms ≥ 400`);
    assert.ok(gaps[1]! >= 800 - slack, `second gap ${gaps[1]} ms ≥ 800: doubled, not fixed`);
    assert.ok(gaps[2]! >= 1000 - slack && gaps[3]! >= 1000 - slack, `capped gaps ${gaps[2]}, ${gaps[3]} ms ≥ 1000`);
    assert.ok(gaps[3]! < 2_500, `fourth gap ${gaps[3]} ms: capped at 1 s, not 3.2 s`);
  } finally {
    await worker.stop();
  }
});

test("a step that always fails transiently is retried exactly its attempts, then the job fails", async () => {
  const worker = await bed.startWorker();
  try {
    const jobId = await bed.trigger("hopeless", { version: "h1" });
    await until("the job failed", async () => (await bed.queue.getJobState(jobId)) === "failed", 30_000);
    const job = await bed.queue.getJob(jobId);
    assert.equal(job?.attemptsMade, 3);
    // Longer than any backoff it could still have: no fourth attempt comes.
    await new Promise((r) => setTimeout(r, 1_000));
    const runs = await bed.runsOfJob(jobId);
    assert.deepEqual(
      runs.map((r) => [r.attempt, r.status]),
      [
        [1, "failed"],
        [2, "failed"],
        [3, "failed"],
      ],
    );
    for (const run of runs) assert.match(run.reason ?? "", /^transient: step flaky exited 75/);
    // Only the last says no retry follows.
    assert.deepEqual(
      runs.map((r) => /; no retry left \(try 3 of 3\): the job failed$/.test(r.reason ?? "")),
      [false, false, true],
      JSON.stringify(runs.map((r) => r.reason)),
    );
  } finally {
    await worker.stop();
  }
});

test("a permanent failure fails at once: no retry", async () => {
  const worker = await bed.startWorker();
  try {
    const jobId = await bed.trigger("broken", { version: "p1" });
    const failed = await bed.waitForRun((r) => r.jobId === jobId && r.status === "failed", 20_000);
    assert.equal(failed.reason, "step fail exited 3");
    const job = await bed.queue.getJob(jobId);
    await new Promise((r) => setTimeout(r, 600)); // longer than the backoff: a retry would have started
    assert.equal(await job?.getState(), "failed");
    assert.equal((await bed.runsOfJob(jobId)).length, 1, "one attempt only");
  } finally {
    await worker.stop();
  }
});

test("a failure never deletes the idempotency key another run set: the version stays rebuilt", async () => {
  const fs = await import("node:fs");
  const path = await import("node:path");
  const output = bed.definitions.rebuilds.get("toggled")!.outputPath;
  fs.mkdirSync(output, { recursive: true });
  const key = bed.keys.idempotency(idempotencyKey("toggled", undefined, "k1"));
  const worker = await bed.startWorker();
  try {
    const first = await bed.trigger("toggled", { version: "k1" });
    const rebuilt = await bed.waitForRun((r) => r.jobId === first && r.status === "rebuilt", 20_000);
    assert.equal(await bed.main.get(key), rebuilt.id, "success records the idempotency key");

    const repeat = await bed.trigger("toggled", { version: "k1" });
    const skipped = await bed.waitForRun((r) => r.jobId === repeat && r.status === "skipped", 20_000);
    assert.match(skipped.reason ?? "", /^already-rebuilt/);

    fs.writeFileSync(path.join(output, "fail"), "");
    const forced = await bed.trigger("toggled", { version: "k1", force: true });
    await bed.waitForRun((r) => r.jobId === forced && r.status === "failed", 20_000);
    // The forced run's failure changed nothing published: the earlier run's key stands.
    assert.equal(await bed.main.get(key), rebuilt.id, "the failure left the other run's key");

    fs.rmSync(path.join(output, "fail"));
    const after = await bed.trigger("toggled", { version: "k1" });
    const skippedAgain = await bed.waitForRun((r) => r.jobId === after && r.status === "skipped", 20_000);
    assert.match(skippedAgain.reason ?? "", /^already-rebuilt/);
  } finally {
    await worker.stop();
  }
});
