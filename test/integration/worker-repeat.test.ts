/**
 * The repeat of a version already rebuilt (the duplicate an at-least-once queue delivers) is
 * skipped in one round trip, without taking the claim: recorded and indexed as a skip, marker of
 * the waiting trigger dropped if it is this job's. Drives `runRebuild` against a real Redis.
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { after, before, test } from "node:test";
import { acquireClaim, claimName, releaseClaim } from "../../lib/claims";
import { jobKey, jobLockKey } from "../../lib/rebuilds/queue";
import { runRebuild, type RebuildDeps, type RebuildJob } from "../../lib/rebuilds/run-rebuild";
import { idempotencyKey } from "../../lib/rebuilds/version";
import { listRuns } from "../../lib/runs/list";
import { readRun } from "../../lib/runs/records";
import { createTestBed, rebuildDepsOf, type TestBed } from "../support/stack";

let bed: TestBed;
let deps: RebuildDeps;
before(async () => {
  bed = await createTestBed({
    tiles: {
      output: "out/repeat",
      claim: { ttl: "4s", refreshEvery: "1s" },
      steps: [{ name: "write", run: ["sh", "-c", 'echo "$CLAIMWATCH_VERSION" > "$CLAIMWATCH_WORK/v"'] }],
    },
  });
  deps = rebuildDepsOf(bed);
});
after(() => bed.close());

let jobs = 0;
function job(version: string, force = false): RebuildJob {
  return {
    id: `run-repeat-${++jobs}`,
    attempt: 1,
    createdAt: Date.now(),
    data: { rebuild: "tiles", version, force, trigger: "api" },
    signal: new AbortController().signal,
  };
}

/** The claim the worker takes: named for the definition's (resolved) output path. */
const claimOfTiles = () => claimName(bed.definitions.rebuilds.get("tiles")!.claimPath);
/** Every entry under `dir` (builds, `current`, fence records, work dirs): its kind, size, mtime, link target. */
function snapshotTree(dir: string): Record<string, string> {
  const entries: Record<string, string> = {};
  const walk = (at: string) => {
    for (const name of fs.readdirSync(at)) {
      const file = path.join(at, name);
      const stat = fs.lstatSync(file);
      const kind = stat.isSymbolicLink() ? `link ${fs.readlinkSync(file)}` : stat.isDirectory() ? "dir" : "file";
      entries[path.relative(dir, file)] = `${kind} ${stat.size} ${stat.mtimeMs}`;
      if (stat.isDirectory()) walk(file);
    }
  };
  walk(dir);
  return entries;
}
const fenceOf = async () => Number((await bed.claims.get(bed.keys.claimFence(claimOfTiles()))) ?? 0);

test("a repeat is skipped as already-rebuilt, recorded and indexed as a skip, without taking the claim", async () => {
  const first = await runRebuild(deps, job("v1"));
  assert.equal(first.status, "rebuilt");
  const name = claimOfTiles();
  const fence = await fenceOf();
  assert.ok(fence >= 1);

  const output = bed.definitions.rebuilds.get("tiles")!.outputPath;
  const before = snapshotTree(output);
  assert.ok(
    Object.keys(before).some((entry) => entry.startsWith("builds/")) && "current" in before,
    "a build and current to compare",
  );
  const published = await bed.claims.hgetall(bed.keys.published(name));
  const repeatJob = job("v1");
  const repeat = await runRebuild(deps, repeatJob);
  // It writes nothing: no build, no work dir, no mark, `current` and the published pointer as they were.
  assert.deepEqual(snapshotTree(output), before, "the output is untouched");
  assert.deepEqual(await bed.claims.hgetall(bed.keys.published(name)), published);
  assert.deepEqual(repeat, {
    status: "skipped",
    reason: "already-rebuilt",
    runId: `${repeatJob.id}-a1`,
    version: "v1",
  });
  assert.equal(await fenceOf(), fence, "no claim was granted");
  assert.equal(await bed.claims.exists(bed.keys.claim(name)), 0);

  const record = await readRun(bed.main, bed.keys, `${repeatJob.id}-a1`);
  assert.ok(record);
  assert.equal(record.status, "skipped");
  assert.equal(record.reason, `already-rebuilt: already rebuilt by run ${first.status === "rebuilt" && first.runId}`);
  assert.equal(record.jobId, repeatJob.id);
  assert.equal(record.version, "v1");
  assert.equal(record.workerId, deps.worker.id);
  assert.equal(record.idempotencyKey, idempotencyKey("tiles", undefined, "v1"));
  assert.ok(record.finishedAt !== null && record.startedAt !== null);
  assert.ok((await bed.main.pttl(bed.keys.run(record.id))) > 0, "the record expires as a backstop");

  for (const filter of [
    {},
    { rebuild: "tiles" },
    { status: "skipped" as const },
    { rebuild: "tiles", status: "skipped" as const },
  ]) {
    const page = await listRuns(bed.main, bed.keys, filter, 50);
    assert.ok(
      page.runs.some((run) => run.id === record.id),
      `listed under ${JSON.stringify(filter)}`,
    );
  }
  const rebuiltPage = await listRuns(bed.main, bed.keys, { status: "rebuilt" }, 50);
  assert.ok(!rebuiltPage.runs.some((run) => run.id === record.id), "not listed as rebuilt");
});

test("the repeat drops its own waiting-trigger marker, never another job's", async () => {
  await runRebuild(deps, job("v2"));
  const mine = job("v2");
  const marker = bed.keys.pendingTrigger("tiles", undefined, "v2", false);
  await bed.main.set(marker, mine.id);
  assert.equal((await runRebuild(deps, mine)).status, "skipped");
  assert.equal(await bed.main.get(marker), null, "this job's marker is dropped");

  await bed.main.set(marker, "run-somebody-else");
  assert.equal((await runRebuild(deps, job("v2"))).status, "skipped");
  assert.equal(await bed.main.get(marker), "run-somebody-else", "a newer trigger's marker stays");
});

test("a forced run of a rebuilt version takes the claim and rebuilds again", async () => {
  await runRebuild(deps, job("v3"));
  const before = await fenceOf();
  const forced = await runRebuild(deps, job("v3", true));
  assert.equal(forced.status, "rebuilt");
  assert.equal(await fenceOf(), before + 1, "a new grant");
});

test("inputs back to an earlier version (A, B, A): the request for A builds and publishes it again; the output serves A", async () => {
  const output = bed.definitions.rebuilds.get("tiles")!.outputPath;
  const served = () => fs.readFileSync(path.join(output, "current", "v"), "utf8").trim();
  assert.equal((await runRebuild(deps, job("back-a"))).status, "rebuilt");
  assert.equal((await runRebuild(deps, job("back-b"))).status, "rebuilt");
  assert.equal(served(), "back-b");
  const again = await runRebuild(deps, job("back-a"));
  assert.equal(again.status, "rebuilt", JSON.stringify(again));
  assert.equal(served(), "back-a", "the output serves the version asked for last");
  // Now A is what the output serves: its repeat is skipped, and B's request builds.
  assert.equal((await runRebuild(deps, job("back-a"))).status, "skipped");
  assert.equal((await runRebuild(deps, job("back-b"))).status, "rebuilt");
  assert.equal(served(), "back-b");
});

/** Runs `fn` while the tiles claim is held by `holder` (a job of this test's making), then releases it. */
async function whileTilesHeldBy(holder: Parameters<typeof acquireClaim>[3], fn: () => Promise<void>): Promise<void> {
  const held = await acquireClaim(bed.claims, bed.keys, claimOfTiles(), holder, {
    ttlMs: 30_000,
    refreshEveryMs: 10_000,
  });
  assert.equal(held.status, "acquired");
  try {
    await fn();
  } finally {
    if (held.status === "acquired") await releaseClaim(bed.claims, bed.keys, claimOfTiles(), held.token);
  }
}

test("a version that is not rebuilt is not recorded as a skip and goes on to the claim", async () => {
  // Another version holds the output: the job is deferred right after the check; its record
  // says so (a final "deferred"), never "skipped".
  await whileTilesHeldBy({ jobId: "run-other", version: "v-other" }, async () => {
    const skippedBefore = await bed.main.zcard(bed.keys.runIndex({ status: "skipped" }));
    const waiting = job("v4");
    const outcome = await runRebuild(deps, waiting);
    assert.equal(outcome.status, "deferred");
    const record = await readRun(bed.main, bed.keys, `${waiting.id}-a1`);
    assert.equal(record?.status, "deferred", "the attempt is recorded as deferred");
    assert.match(record?.reason ?? "", /held by .* building v-other/);
    assert.equal(await bed.main.zcard(bed.keys.runIndex({ status: "skipped" })), skippedBefore);
  });
  const before = await fenceOf();
  const fresh = job("v4");
  assert.equal((await runRebuild(deps, fresh)).status, "rebuilt");
  assert.equal(await fenceOf(), before + 1, "it took the claim");
});

test("a claim held for the same version carries the request only while its holder's job is worked (BullMQ's lock): else the job waits and builds", async () => {
  const lock = jobLockKey(bed.keys, "run-holder");
  await whileTilesHeldBy({ jobId: "run-holder", version: "v-same" }, async () => {
    // Its job is worked: a claim-held skip.
    await bed.main.set(lock, "holder-token", "PX", 30_000);
    const trusted = await runRebuild(deps, job("v-same"));
    assert.equal(trusted.status, "skipped", JSON.stringify(trusted));
    // Its job lock is gone (its worker paused past it; the job redelivered, perhaps ended): this
    // request is not left to it.
    await bed.main.del(lock);
    const waiting = job("v-same");
    const outcome = await runRebuild(deps, waiting);
    assert.equal(outcome.status, "deferred", JSON.stringify(outcome));
    assert.equal((await readRun(bed.main, bed.keys, `${waiting.id}-a1`))?.status, "deferred");
  }).finally(() => bed.main.del(lock));
  assert.equal((await runRebuild(deps, job("v-same"))).status, "rebuilt", "once the output is free it builds");
});

test("a same-version holder whose attempt is not its job's current one (a later attempt works the job) carries no request", async () => {
  const lock = jobLockKey(bed.keys, "run-holder-2");
  await whileTilesHeldBy({ jobId: "run-holder-2", version: "v-same-2", attempt: 2 }, async () => {
    await bed.main.set(lock, "attempt-3-token", "PX", 30_000);
    // Attempt 3 of the holder's job works it (completing, perhaps skipped): attempt 2 ends unbuilt.
    await bed.main.hset(jobKey(bed.keys, "run-holder-2"), "ats", "3");
    assert.equal((await runRebuild(deps, job("v-same-2"))).status, "deferred");
    // Attempt 2 is the one working it: trusted.
    await bed.main.hset(jobKey(bed.keys, "run-holder-2"), "ats", "2");
    assert.equal((await runRebuild(deps, job("v-same-2"))).status, "skipped");
  }).finally(() => bed.main.del(lock, jobKey(bed.keys, "run-holder-2")));
});

test("a same-version holder whose job published this version here before carries no request: it may end without publishing (soak, helper-154; review helper-158)", async () => {
  const lock = jobLockKey(bed.keys, "run-holder-3");
  await whileTilesHeldBy({ jobId: "run-holder-3", version: "v-same-3", attempt: 1 }, async () => {
    // Its job is worked (lock held, its attempt the current one): trusted so far.
    await bed.main.set(lock, "attempt-1-token", "PX", 30_000);
    await bed.main.hset(jobKey(bed.keys, "run-holder-3"), "ats", "1");
    assert.equal((await runRebuild(deps, job("v-same-3"))).status, "skipped");
    // A run of its job is listed as having published v-same-3 here (the same run id picked up
    // again after the queue's Redis forgot it): it may end as "published before", so this waits.
    await bed.claims.rpush(bed.keys.publishedRuns(claimOfTiles()), "run-holder-3-a1 v-same-3 -");
    const waiting = job("v-same-3");
    assert.equal((await runRebuild(deps, waiting)).status, "deferred");
    assert.equal((await readRun(bed.main, bed.keys, `${waiting.id}-a1`))?.status, "deferred");
  }).finally(() => bed.main.del(lock, jobKey(bed.keys, "run-holder-3")));
});
