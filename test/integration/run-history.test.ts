/**
 * The run history tells the truth, on real worker processes (killed, with the queue paused, with
 * a skewed clock) and a real Redis:
 *  - an attempt whose worker died reaches a final status, whether the next attempt waits
 *    (deferred) or no next attempt comes at all;
 *  - attempts list in the order they ran (attempt 11 before 10 before 9);
 *  - trimming never deletes a run still in flight;
 *  - a worker whose clock is behind is live, and judged by the Redis clock (heartbeat, repair);
 *  - every write of a record carries the configured retention;
 *  - a job that fails before it can start (inputs unreadable, bad job data) still leaves a record.
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { acquireClaim, claimName, listClaims, readPublished, releaseClaim } from "../../lib/claims";
import { buildDirOf, pointCurrent, readCurrent } from "../../lib/rebuilds/output";
import { serverNow } from "../../lib/redis/time";
import { listRunSummaries, listRuns } from "../../lib/runs/list";
import { readRun } from "../../lib/runs/records";
import { listLiveWorkers } from "../../lib/workers/heartbeat";
import { skewedClockEnv } from "../../scripts/faults/clock";
import { createTestBed, slowStep, type TestBed } from "../support/stack";

const counterFile = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "claimwatch-flaky-")), "count");
const releaseFile = path.join(path.dirname(counterFile), "release-long");
const RUN_AGE_MS = 2 * 3_600_000;

let bed: TestBed;
before(async () => {
  bed = await createTestBed(
    {
      slow: {
        output: "out/slow",
        claim: { ttl: "2s", refreshEvery: "500ms" },
        timeLimit: "2m",
        retries: { attempts: 3, backoff: "200ms", maxBackoff: "1s" },
        steps: [slowStep(4)],
      },
      long: {
        output: "out/long",
        claim: { ttl: "2s", refreshEvery: "500ms" },
        timeLimit: "2m",
        // Runs until the test lets it finish (a file appears): "in flight" for as long as needed.
        steps: [
          {
            name: "hold",
            run: [
              "sh",
              "-c",
              `while [ ! -f '${releaseFile}' ]; do sleep 0.2; done; echo "$CLAIMWATCH_RUN_ID" > "$CLAIMWATCH_WORK/run.txt"`,
            ],
            killGrace: "1s",
          },
        ],
      },
      flaky: {
        output: "out/flaky",
        retries: { attempts: 12, backoff: "100ms", maxBackoff: "200ms" },
        steps: [
          {
            name: "flaky",
            // Exits 75 (declared transient) on its first ten runs, then builds.
            run: [
              "sh",
              "-c",
              `n=$(( $(cat '${counterFile}' 2>/dev/null || echo 0) + 1 )); echo $n > '${counterFile}'; [ $n -gt 10 ] || exit 75; echo ok > "$CLAIMWATCH_WORK/ok"`,
            ],
            transientExitCodes: [75],
          },
        ],
      },
      sourced: {
        output: "out/sourced",
        inputs: ["data/never-written.geojson"],
        retries: { attempts: 1 },
        steps: [{ name: "noop", run: ["true"] }],
      },
    },
    { retention: { runs: 10, runAge: "2h" } },
  );
});
after(async () => {
  await bed.close();
  fs.rmSync(path.dirname(counterFile), { recursive: true, force: true });
});

async function waitUntil(check: () => Promise<boolean>, timeoutMs: number, label: string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`not within ${timeoutMs} ms: ${label}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** Waiting and delayed jobs left by a test go, so the next test's workers do not pick them up. */
async function emptyQueue(): Promise<void> {
  await bed.queue.drain(true);
}

test("a killed attempt is closed as aborted when the redelivered attempt only waits (deferred)", async () => {
  const output = bed.definitions.rebuilds.get("slow")!.outputPath;
  const name = claimName(output);
  const victim = await bed.startWorker();
  const jobId = await bed.trigger("slow", { version: "v-killed-deferred" });
  const first = await bed.waitForRun((r) => r.jobId === jobId && r.status === "running", 15_000);
  assert.equal(await victim.stop("SIGKILL"), null);
  // The dead attempt's claim runs out; then another version holds the output, so the
  // redelivered attempt defers instead of building (and never reaches the old closing code).
  await waitUntil(async () => (await bed.claims.exists(bed.keys.claim(name))) === 0, 15_000, "claim expired");
  const other = await acquireClaim(
    bed.claims,
    bed.keys,
    name,
    { jobId: "someone-else", version: "v-other" },
    { ttlMs: 60_000, refreshEveryMs: 20_000 },
  );
  assert.equal(other.status, "acquired");
  const next = await bed.startWorker();
  try {
    const closed = await bed.waitForRun(
      (r) => r.id === first.id && r.status === "aborted",
      45_000,
      "the killed attempt's record closed",
    );
    assert.match(closed.reason ?? "", /redelivered as attempt \d+/);
    const later = (await bed.runsOfJob(jobId)).filter((r) => r.attempt > first.attempt);
    assert.ok(later.length > 0 && later.every((r) => r.status === "deferred" || r.status === "running"));
  } finally {
    await next.stop();
    if (other.status === "acquired") await releaseClaim(bed.claims, bed.keys, name, other.token);
    await emptyQueue();
  }
});

test("a killed attempt that no later attempt follows (queue paused, job never picked up again) is closed", async () => {
  const victim = await bed.startWorker();
  const jobId = await bed.trigger("slow", { version: "v-killed-alone" });
  const first = await bed.waitForRun((r) => r.jobId === jobId && r.status === "running", 15_000);
  await bed.queue.pause();
  assert.equal(await victim.stop("SIGKILL"), null);
  const sweeper = await bed.startWorker();
  try {
    const closed = await bed.waitForRun(
      (r) => r.id === first.id && r.status !== "running",
      60_000,
      "the dead worker's record closed without a next attempt",
    );
    assert.equal(closed.status, "aborted");
    assert.match(closed.reason ?? "", /stopped beating/);
    assert.equal((await bed.runsOfJob(jobId)).length, 1, "no other attempt ran");
  } finally {
    await sweeper.stop();
    await emptyQueue();
    await bed.queue.resume();
  }
});

test("attempts list newest first by their own start: attempt 11 (rebuilt) before 10 and 9", async () => {
  const worker = await bed.startWorker();
  try {
    const jobId = await bed.trigger("flaky", { version: "v-flaky" });
    const rebuilt = await bed.waitForRun((r) => r.jobId === jobId && r.status === "rebuilt", 90_000);
    assert.equal(rebuilt.attempt, 11);
    const page = await listRuns(bed.main, bed.keys, { rebuild: "flaky" }, 3);
    assert.deepEqual(
      page.runs.map((r) => r.attempt),
      [11, 10, 9],
      "the Runs list",
    );
    const [last] = await listRunSummaries(bed.main, bed.keys, { rebuild: "flaky" }, 1);
    assert.equal(last?.id, rebuilt.id, "the Rebuilds page's last run");
    assert.equal(last?.status, "rebuilt");
  } finally {
    await worker.stop();
  }
});

test("trimming by count never deletes a run in flight, and its record stays whole", async () => {
  // One job at a time: the long run holds it, so the duplicates go to the other worker, which
  // falls idle after them and trims at its next heartbeat.
  const runner = await bed.startWorker({ CLAIMWATCH_WORKER_CONCURRENCY: "1" });
  const jobId = await bed.trigger("long", { version: "v-long" });
  const first = await bed.waitForRun((r) => r.jobId === jobId && r.status === "running", 15_000);
  const others = await bed.startWorker();
  try {
    // Newer duplicates (direct re-adds, a second delivery each), all skipped: the long run is
    // now the oldest of more than `retention.runs` records of its rebuild.
    for (let i = 0; i < 12; i++) {
      await bed.queue.add("long", { rebuild: "long", version: "v-long" }, { jobId: `dup-long-${i}` });
    }
    await bed.waitForRun((r) => r.jobId === "dup-long-11" && r.status === "skipped", 30_000);
    // An idle worker trims at its next heartbeat: the two oldest finished duplicates go.
    await waitUntil(
      async () => (await readRun(bed.main, bed.keys, "dup-long-0-a1")) === null,
      30_000,
      "trimmed to the retention",
    );
    assert.equal((await readRun(bed.main, bed.keys, first.id))?.status, "running", "the run in flight is kept");
    fs.writeFileSync(releaseFile, "go");
    const done = await bed.waitForRun((r) => r.id === first.id && r.status === "rebuilt", 40_000);
    assert.equal(done.jobId, jobId);
    assert.equal(done.attempt, first.attempt);
    assert.equal(done.version, "v-long");
    assert.ok(done.buildHash);
  } finally {
    await runner.stop();
    await others.stop();
  }
});

test("a worker whose clock is 30 s behind is live and its claim not stale: both judged on the Redis clock", async () => {
  const skewed = await bed.startWorker(skewedClockEnv("-30s"));
  try {
    const jobId = await bed.trigger("slow", { version: "v-skewed" });
    const running = await bed.waitForRun(
      (r) => r.jobId === jobId && r.status === "running" && r.fence !== null,
      15_000,
    );
    const live = await listLiveWorkers(bed.main, bed.keys);
    const mine = live.find((w) => w.pid === skewed.pid);
    assert.ok(mine, `the skewed worker is live (live: ${JSON.stringify(live.map((w) => w.id))})`);
    assert.equal(running.workerId, mine.id);
    const page = await listClaims(bed.claims, bed.keys, { liveWorkerIds: new Set(live.map((w) => w.id)) });
    const claim = page.claims.find((c) => c.holder.jobId === jobId);
    assert.ok(claim, "its claim is listed");
    assert.deepEqual(claim.stale, [], "not stale");
    // Its start, on the Redis clock too (the beat measured the offset): not 30 s in the past.
    assert.ok(Math.abs(mine.startedAt - Date.now()) < 20_000, `started ${Date.now() - mine.startedAt} ms ago`);
    const done = await bed.waitForRun((r) => r.jobId === jobId && r.status === "rebuilt", 30_000);
    // Its step's times on the run's clock (Redis): within the run, not 30 s before it.
    const [step] = done.steps;
    assert.ok(step && step.finishedAt !== null, JSON.stringify(done.steps));
    const slack = 2_000; // the offset is measured over a round trip; the run's times are Redis's own
    assert.ok(
      step.startedAt >= done.startedAt! - slack,
      `step ${step.startedAt - done.startedAt!} ms after the run's start`,
    );
    assert.ok(
      step.finishedAt <= done.finishedAt! + slack,
      `step ends ${step.finishedAt - done.finishedAt!} ms after the run`,
    );
  } finally {
    await skewed.stop();
  }
});

test("repair judges a published pointer's age by the Redis clock, not a worker clock that is behind", async () => {
  const output = bed.definitions.rebuilds.get("slow")!.outputPath;
  const name = claimName(output);
  const builder = await bed.startWorker();
  try {
    const jobId = await bed.trigger("slow", { version: "v-repair" });
    await bed.waitForRun((r) => r.jobId === jobId && r.status === "rebuilt", 30_000);
  } finally {
    await builder.stop();
  }
  const published = await readPublished(bed.claims, bed.keys, name);
  assert.ok(published, "a build of slow is published");
  // `current` points at another build; the pointer was published a minute ago (Redis clock).
  const stray = "f".repeat(32);
  fs.cpSync(buildDirOf(output, published.value), buildDirOf(output, stray), { recursive: true });
  await pointCurrent(output, stray);
  await bed.claims.hset(bed.keys.published(name), "publishedAt", String((await serverNow(bed.claims)) - 60_000));
  const skewed = await bed.startWorker(skewedClockEnv("-10m"));
  try {
    await skewed.waitFor(/repaired .*current/, 30_000);
    assert.equal(await readCurrent(output), published.value);
  } finally {
    await skewed.stop();
  }
});

test("every write of a run record, the first included, carries the configured retention", async () => {
  const worker = await bed.startWorker();
  try {
    const jobId = await bed.trigger("slow", { version: "v-retention" });
    const running = await bed.waitForRun(
      (r) => r.jobId === jobId && r.status === "running" && r.fence !== null,
      15_000,
    );
    const limit = RUN_AGE_MS + 86_400_000;
    const ttl = await bed.main.pttl(bed.keys.run(running.id));
    assert.ok(ttl > 0 && ttl <= limit, `record TTL ${ttl} ms ≤ runAge + 1 d (${limit} ms)`);
    await bed.waitForRun((r) => r.jobId === jobId && r.status === "rebuilt", 30_000);
  } finally {
    await worker.stop();
  }
});

test("a job that fails before it can start (inputs unreadable, bad job data) still leaves a failed record", async () => {
  const worker = await bed.startWorker();
  try {
    const unreadable = await bed.trigger("sourced");
    const failed = await bed.waitForRun((r) => r.jobId === unreadable && r.status === "failed", 20_000);
    assert.match(failed.reason ?? "", /inputs unreadable/);
    assert.equal(failed.rebuild, "sourced");
    const [listed] = await listRunSummaries(bed.main, bed.keys, { rebuild: "sourced" }, 1);
    assert.equal(listed?.id, failed.id, "listed under its rebuild");

    const unknown = await bed.queue.add("x", { rebuild: "no-such-rebuild", version: "v1" }, { attempts: 1 });
    const bad = await bed.queue.add("x", { bogus: true }, { attempts: 1 });
    const unknownRun = await bed.waitForRun((r) => r.jobId === unknown.id && r.status === "failed", 20_000);
    assert.match(unknownRun.reason ?? "", /unknown rebuild 'no-such-rebuild'/);
    const badRun = await bed.waitForRun((r) => r.jobId === bad.id && r.status === "failed", 20_000);
    assert.match(badRun.reason ?? "", /invalid job data/);
  } finally {
    await worker.stop();
  }
});
