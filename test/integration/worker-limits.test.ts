/**
 * The seeds' gotchas that no other test runs into on real workers (black-box helper-129):
 *   - a job's time limit: the run is stopped when it is reached, recorded aborted with the limit,
 *     its claim released, nothing published, no step process left, and it is not retried;
 *   - a claim key that vanishes mid-run (Redis evicting it, or losing it): the holder stops its
 *     step and hands the request on, and the same job rebuilds later under a newer fence;
 *   - claim names fine enough that one slow rebuild blocks nothing else: two tenants of one
 *     rebuild and another rebuild run side by side.
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { after, before, test } from "node:test";
import { claimName, readPublished } from "../../lib/claims";
import { outputDirOf } from "../../lib/rebuilds/definitions";
import { readCurrent } from "../../lib/rebuilds/output";
import { createTestBed, slowStep, type TestBed } from "../support/stack";
import { OUTPUT_CLAIM_FILE } from "../../lib/rebuilds/output-claim";
import { descendantPids } from "../support/processes";
import { until } from "../support/until";

let bed: TestBed;
before(async () => {
  bed = await createTestBed({
    overtime: {
      output: "out/overtime",
      claim: { ttl: "1s", refreshEvery: "300ms" },
      timeLimit: "3s",
      retries: { attempts: 3, backoff: "200ms", maxBackoff: "1s" },
      steps: [
        { name: "work", run: ["sh", "-c", 'echo started > "$CLAIMWATCH_WORK/started"; sleep 30'], killGrace: "1s" },
      ],
    },
    vanish: {
      output: "out/vanish",
      claim: { ttl: "2s", refreshEvery: "500ms" },
      timeLimit: "2m",
      retries: { attempts: 3, backoff: "200ms", maxBackoff: "1s" },
      steps: [slowStep(4)],
    },
    side: {
      output: "out/side",
      tenants: ["acme", "globex"],
      claim: { ttl: "4s", refreshEvery: "1s" },
      timeLimit: "2m",
      steps: [slowStep(3)],
    },
    moved: {
      output: "out/moved",
      claim: { ttl: "4s", refreshEvery: "1s" },
      timeLimit: "2m",
      retries: { attempts: 3, backoff: "200ms", maxBackoff: "1s" },
      steps: [{ name: "write", run: ["sh", "-c", 'echo "$CLAIMWATCH_VERSION" > "$CLAIMWATCH_WORK/v"'] }],
    },
    other: {
      output: "out/other",
      claim: { ttl: "4s", refreshEvery: "1s" },
      timeLimit: "2m",
      steps: [slowStep(3)],
    },
  });
});
after(() => bed.close());

const claimOf = (rebuild: string, tenant?: string) =>
  claimName(bed.definitions.rebuilds.get(rebuild)!.claimPath, tenant);

test("a run past its time limit is stopped: failed with the limit (black-box helper-167: it said aborted, and no alert saw it), claim released, nothing published, no step left, not retried", async () => {
  const worker = await bed.startWorker();
  try {
    const jobId = await bed.trigger("overtime", { version: "v-late" });
    const running = await bed.waitForRun(
      (r) => r.jobId === jobId && r.status === "running" && r.fence !== null,
      15_000,
    );
    const ended = await bed.waitForRun((r) => r.id === running.id && r.status !== "running", 30_000, "the run's end");
    assert.equal(ended.status, "failed", JSON.stringify(ended));
    assert.match(ended.reason ?? "", /^time limit of 3000 ms exceeded/);
    await until("the job failed", async () => (await bed.queue.getJobState(jobId)) === "failed", 10_000);
    const job = await bed.queue.getJob(jobId);
    assert.equal(job?.attemptsMade, 1, "a time limit is not retried");
    assert.deepEqual(
      (await bed.runsOfJob(jobId)).map((r) => r.attempt),
      [1],
      "one attempt",
    );
    assert.equal(await bed.claims.exists(bed.keys.claim(claimOf("overtime"))), 0, "the claim is released");
    assert.equal(await readPublished(bed.claims, bed.keys, claimOf("overtime")), null, "nothing published");
    assert.equal(await readCurrent(outputDirOf(bed.definitions.rebuilds.get("overtime")!, undefined)), null);
    const left = descendantPids(worker.pid).filter((pid) => {
      try {
        return /sleep/.test(fs.readFileSync(`/proc/${pid}/cmdline`, "utf8"));
      } catch {
        return false;
      }
    });
    assert.deepEqual(left, [], "no step process is left running");
  } finally {
    await worker.stop();
  }
});

test("a claim key that vanishes mid-run: the holder stops and hands the request on; the job rebuilds under a newer fence", async () => {
  const worker = await bed.startWorker();
  try {
    const name = claimOf("vanish");
    const jobId = await bed.trigger("vanish", { version: "v-gone" });
    const first = await bed.waitForRun((r) => r.jobId === jobId && r.status === "running" && r.fence !== null, 15_000);
    // What eviction (or a Redis that lost it) does: the key is gone, nobody released it.
    assert.equal(await bed.claims.del(bed.keys.claim(name)), 1);
    const stopped = await bed.waitForRun(
      (r) => r.id === first.id && r.status !== "running",
      15_000,
      "the holder's end",
    );
    assert.equal(stopped.status, "deferred", JSON.stringify(stopped));
    assert.equal(stopped.buildHash, null, "the stopped attempt built nothing");
    const rebuilt = await bed.waitForRun(
      (r) => r.jobId === jobId && r.status === "rebuilt",
      30_000,
      "the same job's rebuild",
    );
    assert.ok(rebuilt.attempt > first.attempt);
    assert.ok((rebuilt.fence ?? 0) > (first.fence ?? 0), `a newer fence (${rebuilt.fence} > ${first.fence})`);
    const published = await readPublished(bed.claims, bed.keys, name);
    assert.equal(published?.fence, rebuilt.fence, "the published fence is the rebuild's");
    // The build is the rebuild's own work: the stopped step never finished into it.
    const current = path.join(outputDirOf(bed.definitions.rebuilds.get("vanish")!, undefined), "current");
    assert.equal(fs.readFileSync(path.join(current, "run.txt"), "utf8").trim(), rebuilt.id);
  } finally {
    await worker.stop();
  }
});

test("two tenants of one rebuild and another rebuild run side by side: one slow rebuild blocks nothing else", async () => {
  const worker = await bed.startWorker({ CLAIMWATCH_WORKER_CONCURRENCY: "4" });
  try {
    const jobs = [
      await bed.trigger("side", { tenant: "acme", version: "v-side" }),
      await bed.trigger("side", { tenant: "globex", version: "v-side" }),
      await bed.trigger("other", { version: "v-side" }),
    ];
    const runs = [];
    for (const jobId of jobs) {
      runs.push(await bed.waitForRun((r) => r.jobId === jobId && r.status !== "running", 30_000, `job ${jobId}'s end`));
    }
    for (const run of runs) assert.equal(run.status, "rebuilt", JSON.stringify(run));
    // Each step sleeps 3 s: run one after another they could not all have been under way at once.
    const latestStart = Math.max(...runs.map((r) => r.startedAt!));
    const earliestEnd = Math.min(...runs.map((r) => r.finishedAt!));
    assert.ok(
      latestStart < earliestEnd,
      `all three were under way at once (${JSON.stringify(runs.map((r) => [r.startedAt, r.finishedAt]))})`,
    );
  } finally {
    await worker.stop();
  }
});

test("an output directory another path's claim names (a bind or NFS mount) is refused: failed for good, naming that claim, no claim taken, nothing published; one path again rebuilds", async () => {
  const definition = bed.definitions.rebuilds.get("moved")!;
  const outputDir = outputDirOf(definition, undefined);
  // What a worker reaching this directory at another path recorded first (lib/rebuilds/output-claim.ts).
  fs.mkdirSync(outputDir, { recursive: true });
  fs.writeFileSync(path.join(outputDir, OUTPUT_CLAIM_FILE), "output:/mnt/elsewhere/moved\n");
  const worker = await bed.startWorker();
  try {
    const jobId = await bed.trigger("moved", { version: "v-moved" });
    const ended = await bed.waitForRun((r) => r.jobId === jobId && r.status !== "running", 30_000, "the run's end");
    assert.equal(ended.status, "failed", JSON.stringify(ended));
    assert.match(
      ended.reason ?? "",
      /is the directory of claim 'output:\/mnt\/elsewhere\/moved' \(its \.claimwatch-claim says so\)/,
    );
    await until("the job failed", async () => (await bed.queue.getJobState(jobId)) === "failed", 10_000);
    assert.equal((await bed.queue.getJob(jobId))?.attemptsMade, 1, "not retried: the configuration must change");
    assert.equal(ended.fence, null, "no claim was granted to it");
    assert.equal(await bed.claims.exists(bed.keys.claim(claimOf("moved"))), 0, "no claim is held");
    assert.equal(await readPublished(bed.claims, bed.keys, claimOf("moved")), null, "nothing published");
    // The output moved on purpose: the file removed, the next run records this path's claim and rebuilds.
    fs.rmSync(path.join(outputDir, OUTPUT_CLAIM_FILE));
    const again = await bed.trigger("moved", { version: "v-moved-2" });
    const rebuilt = await bed.waitForRun((r) => r.jobId === again && r.status !== "running", 30_000, "the rebuild");
    assert.equal(rebuilt.status, "rebuilt", JSON.stringify(rebuilt));
    assert.equal(fs.readFileSync(path.join(outputDir, OUTPUT_CLAIM_FILE), "utf8"), `${claimOf("moved")}\n`);
  } finally {
    await worker.stop();
  }
});
