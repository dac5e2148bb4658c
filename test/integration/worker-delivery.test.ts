/**
 * The seeds' verification steps against real worker processes: duplicates skip (not fail),
 * a SIGKILLed worker's rebuild completes elsewhere, a paused worker's late publish is refused,
 * and a deploy (SIGTERM) hands the job back.
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { after, before, test } from "node:test";
import { claimName, readPublished } from "../../lib/claims";
import { hashDirectory, readCurrent } from "../../lib/rebuilds/output";
import { createTestBed, slowStep, type TestBed } from "../support/stack";

let bed: TestBed;
before(async () => {
  bed = await createTestBed({
    slow: {
      output: "out/slow",
      claim: { ttl: "2s", refreshEvery: "500ms" },
      timeLimit: "2m",
      retries: { attempts: 3, backoff: "200ms", maxBackoff: "1s" },
      steps: [slowStep(3)],
    },
  });
});
after(() => bed.close());

async function assertCurrentIsWhole(outputDir: string): Promise<string> {
  const current = await readCurrent(outputDir);
  assert.ok(current, "current points at a build");
  assert.equal(await hashDirectory(path.join(outputDir, "current")), current, "current's bytes match its content hash");
  return current;
}

test("the same (rebuild, version) enqueued twice quickly: one rebuilt, one skipped — not failed, not retried", async () => {
  const a = await bed.startWorker();
  const b = await bed.startWorker();
  try {
    const first = await bed.trigger("slow", { version: "v-dup" });
    await bed.waitForRun((r) => r.jobId === first && r.status === "running" && r.fence !== null, 15_000);
    const second = await bed.trigger("slow", { version: "v-dup" });
    assert.notEqual(second, first, "a running job is not a waiting one: the second trigger is a new job");

    const skipped = await bed.waitForRun((r) => r.jobId === second && r.status === "skipped", 15_000);
    assert.match(skipped.reason ?? "", /^claim-held: /);
    const rebuilt = await bed.waitForRun((r) => r.jobId === first && r.status === "rebuilt", 20_000);
    assert.ok(rebuilt.buildHash);

    const secondJob = await bed.queue.getJob(second);
    assert.equal(await secondJob?.getState(), "completed", "a skip completes the job");
    assert.equal(secondJob?.attemptsMade, 1, "a skip is not retried");
    assert.deepEqual(
      (await bed.runsOfJob(second)).map((r) => r.status),
      ["skipped"],
    );
    const skips = await bed.claims.hget(
      bed.keys.claimSkips,
      claimName(bed.definitions.rebuilds.get("slow")!.claimPath),
    );
    assert.equal(skips, null, "a completed rebuild resets the consecutive skips");
  } finally {
    await a.stop();
    await b.stop();
  }
});

test("SIGKILL mid-run: another worker completes the rebuild and current is whole", async () => {
  // Both workers are up before the job runs (a worker starting on a loaded machine can take longer
  // than the step); the one whose pid the running record names is killed.
  const workers = [await bed.startWorker(), await bed.startWorker()];
  const jobId = await bed.trigger("slow", { version: "v-kill" });
  const running = await bed.waitForRun((r) => r.jobId === jobId && r.status === "running" && r.fence !== null, 15_000);
  const victim = workers.find((w) => running.workerId?.includes(`-${w.pid}-`));
  const survivor = workers.find((w) => w !== victim)!;
  assert.ok(victim, `the running record names one of the workers (${running.workerId})`);
  try {
    assert.equal(await victim.stop("SIGKILL"), null);
    const done = await bed.waitForRun(
      (r) => r.jobId === jobId && r.status === "rebuilt",
      40_000,
      "rebuilt run after the kill",
    );
    assert.ok(done.attempt > running.attempt, "completed by a later attempt");
    // The final record is written before BullMQ moves the job to completed: wait for that too.
    let finishedOn: number | undefined;
    for (let i = 0; i < 100 && finishedOn === undefined; i++) {
      finishedOn = (await bed.queue.getJob(jobId))?.finishedOn;
      if (finishedOn === undefined) await new Promise((r) => setTimeout(r, 100));
    }
    assert.notEqual(finishedOn, undefined, "the job completed");
    const current = await assertCurrentIsWhole(bed.definitions.rebuilds.get("slow")!.outputPath);
    assert.equal(current, done.buildHash);
  } finally {
    await survivor.stop();
  }
});

test("SIGSTOP past the claim TTL: a second worker takes over; after SIGCONT the first aborts and current is the second's", async () => {
  const output = bed.definitions.rebuilds.get("slow")!.outputPath;
  const frozen = await bed.startWorker();
  const jobId = await bed.trigger("slow", { version: "v-pause" });
  // A record says "running" from the attempt's pickup; its fence once the claim is granted.
  const first = await bed.waitForRun((r) => r.jobId === jobId && r.status === "running" && r.fence !== null, 15_000);
  process.kill(frozen.pid, "SIGSTOP");
  const second = await bed.startWorker();
  try {
    // The job lock (5 s) lapses, the stalled check redelivers the job, the claim (2 s TTL) is free.
    const taken = await bed.waitForRun(
      (r) => r.jobId === jobId && r.attempt > first.attempt && r.status === "running" && r.fence !== null,
      30_000,
    );
    assert.ok((taken.fence ?? 0) > (first.fence ?? 0), "the new grant has a higher fence");
    process.kill(frozen.pid, "SIGCONT");

    const rebuilt = await bed.waitForRun((r) => r.id === taken.id && r.status === "rebuilt", 30_000);
    const stale = await bed.waitForRun(
      (r) => r.id === first.id && (r.status === "aborted" || r.status === "superseded"),
      30_000,
      "the paused attempt's final record",
    );
    assert.match(stale.reason ?? "", /claim lost|lock lost|superseded/i);
    assert.equal(stale.buildHash, null, "the paused attempt published nothing");

    const published = await readPublished(bed.claims, bed.keys, claimName(output));
    assert.equal(published?.value, rebuilt.buildHash);
    assert.equal(published?.fence, rebuilt.fence);
    assert.equal(await assertCurrentIsWhole(output), rebuilt.buildHash, "current is the second worker's build");
  } finally {
    await frozen.stop("SIGKILL");
    await second.stop();
  }
});

test("SIGTERM mid-run (a deploy): job back to waiting with no failed attempt, claim released, another worker finishes it", async () => {
  const output = bed.definitions.rebuilds.get("slow")!.outputPath;
  const leaving = await bed.startWorker();
  const jobId = await bed.trigger("slow", { version: "v-deploy" });
  const first = await bed.waitForRun((r) => r.jobId === jobId && r.status === "running" && r.fence !== null, 15_000);
  assert.equal(await leaving.stop("SIGTERM"), 0, "the worker exits 0");

  assert.equal(await bed.claims.exists(bed.keys.claim(claimName(output))), 0, "claim released");
  const job = await bed.queue.getJob(jobId);
  assert.equal(await job?.getState(), "waiting", "job handed back to waiting");
  assert.equal(job?.attemptsMade, 0, "no failed attempt");
  const handedBack = (await bed.runsOfJob(jobId)).find((r) => r.id === first.id);
  assert.equal(handedBack?.status, "aborted");
  assert.match(handedBack?.reason ?? "", /handed back/);
  assert.deepEqual(
    fs.readdirSync(path.join(output, ".work")).filter((name) => name.startsWith(`${first.id}-f`)),
    [],
    "work dir removed",
  );

  const next = await bed.startWorker();
  try {
    const done = await bed.waitForRun((r) => r.jobId === jobId && r.status === "rebuilt", 20_000);
    assert.notEqual(done.id, first.id);
    await assertCurrentIsWhole(output);
  } finally {
    await next.stop();
  }
});
