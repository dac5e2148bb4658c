/**
 * The seeds' verification steps against real worker processes: duplicates skip (not fail),
 * a SIGKILLed worker's rebuild completes elsewhere, a paused worker's late publish is refused,
 * and a deploy (SIGTERM) hands the job back.
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { Worker } from "bullmq";
import { claimName, readPublished } from "../../lib/claims";
import { queuePrefix, REBUILD_QUEUE } from "../../lib/rebuilds/queue";
import { hashDirectory, readCurrent } from "../../lib/rebuilds/output";
import { serverNow } from "../../lib/redis/time";
import { APP_VERSION } from "../../lib/version";
import { newWorkerIdentity } from "../../lib/workers/heartbeat";
import { DEFAULT_WORKER_OPTIONS, startRebuildWorker } from "../../worker/rebuild-worker";
import { createTestBed, slowStep, type TestBed } from "../support/stack";
import { until } from "../support/until";

let bed: TestBed;
/** The stubborn step touches `<this>/<run id>` once it ignores SIGTERM. */
const trappedDir = fs.mkdtempSync(path.join(os.tmpdir(), "cw-trapped-"));
after(() => fs.rmSync(trappedDir, { recursive: true, force: true }));
before(async () => {
  bed = await createTestBed({
    slow: {
      output: "out/slow",
      claim: { ttl: "2s", refreshEvery: "500ms" },
      timeLimit: "2m",
      retries: { attempts: 3, backoff: "200ms", maxBackoff: "1s" },
      steps: [slowStep(3)],
    },
    // A claim that outlives the pause below: only the job lock runs out.
    long: {
      output: "out/long",
      claim: { ttl: "30s", refreshEvery: "1s" },
      timeLimit: "2m",
      steps: [slowStep(12)],
    },
    // A step that ignores SIGTERM: an aborted pickup of it runs on for its kill grace.
    stubborn: {
      output: "out/stubborn",
      claim: { ttl: "30s", refreshEvery: "1s" },
      timeLimit: "2m",
      steps: [
        {
          name: "work",
          run: ["sh", "-c", `trap '' TERM; touch "${trappedDir}/$CLAIMWATCH_RUN_ID"; sleep 6`],
          killGrace: "4s",
        },
      ],
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
    const killedAt = await serverNow(bed.main); // the process has exited by now
    const done = await bed.waitForRun(
      (r) => r.jobId === jobId && r.status === "rebuilt",
      40_000,
      "rebuilt run after the kill",
    );
    assert.ok(done.attempt > running.attempt, "completed by a later attempt");
    // The killed attempt ran until its worker's last sign of life, not until someone closed it.
    const killed = await bed.waitForRun((r) => r.id === running.id && r.status === "aborted", 20_000);
    assert.ok(
      killed.finishedAt !== null && killed.finishedAt >= killed.startedAt! && killed.finishedAt <= killedAt,
      `finished ${killed.finishedAt! - killedAt} ms after the kill`,
    );
    assert.ok(killed.closedAt !== undefined && killed.closedAt >= killedAt, "closed after the kill, and says when");
    for (const step of killed.steps ?? [])
      assert.ok(step.finishedAt !== null && step.finishedAt <= killedAt, `step ${step.name} ends by the kill`);
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

test("one worker paused past its job lock is handed its own job again while the old pickup winds down: the job is rebuilt, no record closed under a live pickup", async () => {
  // BullMQ keys a worker's lock renewals by job id: when a stale pickup of a job ends beside a
  // newer pickup of it on the same worker, BullMQ stops renewing the newer one's lock. Unchecked,
  // every pickup loses its lock to the next and the job never finishes (a CI run saw this).
  const only = await bed.startWorker();
  /**
   * One try: a job, its worker SIGSTOPped past the job lock, a stalled check that puts the job
   * back in the queue, SIGCONT. Whether BullMQ hands the job back before the old pickup has
   * wound down is a race this test cannot steer (the lock renewal may notice the loss first):
   * a try that did not meet the case is made again, at most three times.
   */
  const tryOnce = async (version: string) => {
    const jobId = await bed.trigger("long", { version });
    const first = await bed.waitForRun((r) => r.jobId === jobId && r.status === "running" && r.fence !== null, 15_000);
    process.kill(only.pid, "SIGSTOP");
    // While it is stopped its job lock (5 s) runs out; a stalled check from here puts the job back
    // in the queue, so the worker takes it again the moment it runs, beside its old pickup.
    const checker = new Worker(REBUILD_QUEUE, null, {
      connection: bed.main.duplicate(),
      prefix: queuePrefix(bed.keys),
      autorun: false,
      stalledInterval: 250,
      maxStalledCount: 5,
    });
    checker.on("error", () => {});
    try {
      await new Promise((r) => setTimeout(r, 6_000));
      void checker.startStalledCheckTimer();
      const deadline = Date.now() + 15_000;
      while ((await bed.queue.getJob(jobId).then((job) => job?.getState())) !== "waiting") {
        assert.ok(Date.now() < deadline, "the stalled check puts the job back in the queue");
        await new Promise((r) => setTimeout(r, 100));
      }
    } finally {
      await checker.close();
      process.kill(only.pid, "SIGCONT");
    }
    const rebuilt = await bed.waitForRun((r) => r.jobId === jobId && r.status === "rebuilt", 90_000, "a rebuilt run");
    const met = only
      .output()
      .includes(`job ${jobId}: picked up again while its earlier pickup still runs on this worker`);
    return { jobId, first, rebuilt, met };
  };
  try {
    let attempt = await tryOnce("v-same-worker-1");
    for (let n = 2; !attempt.met && n <= 3; n++) {
      console.log(`# try ${n - 1}: the old pickup wound down before the job came back; trying again`);
      attempt = await tryOnce(`v-same-worker-${n}`);
    }
    const { jobId, first, rebuilt } = attempt;
    assert.ok(
      attempt.met,
      "the worker was handed the job beside its old pickup (what this test is about), in one of three tries",
    );
    const note = JSON.parse((await bed.main.get(bed.keys.deferNote(jobId))) ?? "null") as { reason: string } | null;
    assert.match(
      note?.reason ?? "",
      /earlier pickup still runs on this worker/,
      "the deferral's note for the queue view",
    );
    assert.ok(rebuilt.attempt > first.attempt);
    const runs = await bed.runsOfJob(jobId);
    assert.deepEqual(
      runs.filter((r) => /no longer runs this attempt/.test(r.reason ?? "")).map((r) => r.id),
      [],
      "no record is closed as abandoned while its pickup runs",
    );
    // The final record is written before the job is moved to completed (its claim released,
    // then BullMQ's own move): read at once, the job may still be active (a CI run under load).
    await until(
      `job ${jobId} completed`,
      async () => (await bed.queue.getJob(jobId).then((job) => job?.getState())) === "completed",
      30_000,
    );
    assert.ok(
      runs.every((r) => r.status !== "running"),
      `every record is final: ${JSON.stringify(runs.map((r) => [r.attempt, r.status]))}`,
    );
  } finally {
    await only.stop();
  }
});

test("SIGTERM during the start-up (Redis not answering yet): the worker stops cleanly, exit 0, not cut off by the signal", async () => {
  // A frozen Redis holds the worker in its first heartbeat, before "ready". Without a handler in
  // place by then, SIGTERM ends the process on the spot, as a crash does: running jobs are not
  // handed back and claims stay held for their TTL.
  process.kill(bed.redis.pid, "SIGSTOP");
  let worker;
  try {
    worker = await bed.startWorker({}, { until: /starting: / });
    worker.child.kill("SIGTERM");
    await new Promise((r) => setTimeout(r, 1_000));
    assert.equal(worker.child.signalCode, null, `the worker was not ended by the signal:\n${worker.output()}`);
  } finally {
    process.kill(bed.redis.pid, "SIGCONT");
  }
  assert.equal(await worker.stop("SIGTERM"), 0, `the worker exits 0:\n${worker.output()}`);
  assert.match(worker.output(), /SIGTERM: stopping/);
  assert.doesNotMatch(worker.output(), /ready: /, "a stopping worker does not go on to say it is ready");
  const id = /\[worker ([^\]]+)\] starting: /.exec(worker.output())![1]!;
  assert.equal(await bed.main.exists(bed.keys.workerHeartbeat(id)), 0, "it retired its heartbeat");
});

test("SIGTERM mid-run with Redis frozen (SIGSTOP) throughout: the worker still exits, saying what it could not do", async () => {
  // Nothing the stop sends to Redis is answered: the hand-back, the release, the retire, the
  // closing QUIT. Each is bounded, so the worker ends on its own rather than waiting for a
  // SIGKILL from whoever stopped it; the claim then runs out on its TTL, as a crash's would.
  const worker = await bed.startWorker();
  const jobId = await bed.trigger("slow", { version: "v-frozen-stop" });
  const first = await bed.waitForRun((r) => r.jobId === jobId && r.status === "running" && r.fence !== null, 15_000);
  process.kill(bed.redis.pid, "SIGSTOP");
  let code: number | null | "hung";
  try {
    worker.child.kill("SIGTERM");
    // A hang limit, not a timing goal: the stop's own bounds add up to well under a minute.
    code = await Promise.race([
      new Promise<number | null>((resolve) =>
        worker.child.exitCode !== null ? resolve(worker.child.exitCode) : worker.child.once("exit", resolve),
      ),
      new Promise<"hung">((r) => setTimeout(() => r("hung"), 90_000)),
    ]);
  } finally {
    process.kill(bed.redis.pid, "SIGCONT");
  }
  if (code === "hung") await worker.stop("SIGKILL");
  assert.notEqual(code, "hung", `the worker exits with Redis frozen:\n${worker.output()}`);
  assert.match(worker.output(), /SIGTERM: stopping; handing back/);
  assert.match(worker.output(), /shutdown: Redis did not answer the stop/, "the log says what the stop could not do");
  // Nothing of the stopped attempt is left in the output's work area (its steps were stopped; a
  // dir whose attempt could not end is removed by the stop itself).
  const workArea = path.join(bed.definitions.rebuilds.get("slow")!.outputPath, ".work");
  const left = fs.existsSync(workArea)
    ? fs.readdirSync(workArea).filter((name) => name.startsWith(`${first.id}-`))
    : [];
  assert.deepEqual(left, [], "no work dir of the stopped attempt left");
  // The job is not lost: once Redis answers again, the stalled check hands it to the next worker.
  const next = await bed.startWorker();
  try {
    const done = await bed.waitForRun(
      (r) => r.jobId === jobId && r.status === "rebuilt",
      60_000,
      "the job rebuilt by the next worker",
    );
    assert.notEqual(done.id, first.id);
    // The stopped attempt's record reaches a final status too (its own late writes, or the sweep
    // once the stopped worker's heartbeat has expired): the history does not say it still runs.
    const closed = await bed.waitForRun(
      (r) => r.id === first.id && r.status !== "running",
      60_000,
      "the stopped attempt closed",
    );
    assert.equal(closed.status, "aborted", JSON.stringify(closed));
  } finally {
    await next.stop();
  }
});

/**
 * A rebuild worker in this process (for windows too narrow to hit with a signal on cue), its log
 * lines kept; `logged` waits until a line contains `text`, failing with the log.
 */
function inProcessWorker(concurrency: number) {
  const lines: string[] = [];
  const { worker, running } = startRebuildWorker(
    {
      connection: bed.main,
      main: bed.main,
      claims: bed.claims,
      keys: bed.keys,
      definitions: bed.definitions,
      worker: newWorkerIdentity(APP_VERSION),
      log: (line) => lines.push(line),
    },
    { ...DEFAULT_WORKER_OPTIONS, concurrency },
  );
  const logged = (text: string, what: string) =>
    until(what, async () => lines.some((line) => line.includes(text)), 30_000).catch((error: Error) =>
      assert.fail(`${error.message}:\n${lines.join("\n")}`),
    );
  return { worker, running, lines, logged };
}

test("a job fetched after the stop began is handed back untouched: no run record, no attempt, still waiting", async () => {
  // In process: the window (a fetch under way as SIGTERM arrives) is too narrow to hit with a
  // signal on cue. `abortAll` is what the worker's stop calls before it closes the BullMQ worker.
  const { worker, running, lines, logged } = inProcessWorker(1);
  let jobId: string;
  try {
    await worker.waitUntilReady();
    running.abortAll("shutdown");
    jobId = await bed.trigger("slow", { version: "v-fetched-stopping" });
    await logged(`job ${jobId}: fetched as the worker stopped`, "the worker fetched the job");
  } finally {
    await worker.close();
  }
  const job = await bed.queue.getJob(jobId);
  assert.equal(await job?.getState(), "waiting", "the job waits for the next worker");
  assert.equal(job?.attemptsMade, 0, "no failed attempt");
  // BullMQ counts an attempt at every fetch; the hand-back takes it back. Counted, the next run
  // would be attempt 2, and a paused schedule's tick would pass for one that had started.
  assert.equal(job?.attemptsStarted, 0, "no attempt started");
  assert.deepEqual(await bed.runsOfJob(jobId), [], "no run record: the attempt never ran");
  assert.ok(
    lines.some((line) => line.includes(`job ${jobId}: fetched as the worker stopped; handed back without running`)),
    lines.join("\n"),
  );
  // The next worker runs it.
  const next = await bed.startWorker();
  try {
    const done = await bed.waitForRun((r) => r.jobId === jobId && r.status === "rebuilt", 30_000, "the job rebuilt");
    assert.equal(done.attempt, 1, "the first run is attempt 1");
  } finally {
    await next.stop();
  }
});

test("a stopping worker that fetches a job its aborted earlier pickup still runs hands it back, not defers it", async () => {
  // In process, as above. The earlier pickup is aborted by the stop and runs on for its step's
  // kill grace; meanwhile its job loses its lock (here: moved back to waiting with that pickup's
  // own token, as the stalled check would once the lock ran out) and this worker fetches it again.
  const { worker, running, lines, logged } = inProcessWorker(2);
  let jobId: string;
  try {
    await worker.waitUntilReady();
    jobId = await bed.trigger("stubborn", { version: "v-earlier-stopping" });
    const first = await bed.waitForRun((r) => r.jobId === jobId && r.status === "running" && r.fence !== null, 15_000);
    assert.equal(first.attempt, 1);
    // The stop must find the step already deaf to SIGTERM, or the pickup would end at once.
    await until("the step ignores SIGTERM", async () => fs.existsSync(path.join(trappedDir, first.id)), 30_000);
    running.abortAll("shutdown");
    const token = await bed.main.get(`${worker.toKey(jobId)}:lock`);
    assert.ok(token, "the earlier pickup holds the job's lock");
    await (await bed.queue.getJob(jobId))!.moveToWait(token);
    await logged(`job ${jobId}: fetched as the worker stopped`, "the worker fetched the job again");
    assert.ok(running.ids().includes(jobId), "the earlier pickup still ran when the job was fetched again");
  } finally {
    await worker.close();
  }
  assert.ok(
    lines.some((line) => line.includes(`job ${jobId}: fetched as the worker stopped; handed back without running`)),
    lines.join("\n"),
  );
  const job = await bed.queue.getJob(jobId);
  assert.equal(await job?.getState(), "waiting", "waiting for the next worker, not delayed behind a deferral");
  assert.equal(job?.attemptsStarted, 1, "only the earlier pickup's attempt counts");
  const next = await bed.startWorker();
  try {
    const done = await bed.waitForRun(
      (r) => r.jobId === jobId && r.attempt > 1 && r.status !== "running",
      60_000,
      "the next attempt ended",
    );
    assert.equal(done.attempt, 2, JSON.stringify(done));
    assert.equal(done.status, "rebuilt", JSON.stringify(done));
    // The whole history: the stopped pickup's attempt, then the next worker's; nothing between.
    const history = (await bed.runsOfJob(jobId)).map((r) => `a${r.attempt} ${r.status}`).sort();
    assert.deepEqual(history, ["a1 aborted", "a2 rebuilt"]);
  } finally {
    await next.stop();
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
