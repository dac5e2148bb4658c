/**
 * A full disk under the output (a small ext4 on a loop device, else a tmpfs, mounted by the test
 * as root: scripts/faults/small-disk.ts; notes/faults.md), against a real worker process and Redis:
 *
 * - a step that fills the disk fails its run with the step's own reason; the published build and
 *   `current` stay as they were and still hash to their names; the failed run's partial files are
 *   removed (the disk gets its space back); the claim is free; the worker stays up and the next
 *   request publishes;
 * - a disk with no room left for the worker's own files (its holding mark is the first it writes)
 *   fails the attempt as transient, naming the full disk and the file it could not write; the request is not lost: once there is
 *   room again, a later attempt of the same job publishes, and nothing half-written is left;
 * - a disk that fills after the steps succeeded, before the publish (the fence record beside the
 *   output and `current` are the worker's last writes): the publish is refused, `current` stays
 *   at the published build, the attempt fails as transient, and with room again the same job
 *   publishes its build.
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { after, before, test } from "node:test";
import { idempotencyKey } from "../../lib/rebuilds/version";
import { claimName } from "../../lib/claims";
import { hashDirectory, readCurrent } from "../../lib/rebuilds/output";
import { fillToLastByte, mountSmallDisk, type SmallDisk } from "../../scripts/faults/small-disk";
import { createTestBed, type TestBed, type TestWorker } from "../support/stack";

const DISK_BYTES = 2 * 1024 * 1024;

let bed: TestBed;
let output = "";
let disk: SmallDisk | undefined;
let worker: TestWorker | undefined;
let mountRefused = "";

before(async () => {
  bed = await createTestBed({
    fill: {
      output: "out/fill",
      claim: { ttl: "4s", refreshEvery: "1s" },
      timeLimit: "1m",
      retries: { attempts: 8, backoff: "500ms", maxBackoff: "1s" },
      steps: [
        {
          name: "write",
          // Writes as many random bytes as the version says after its dash (v-300000: 300 000).
          // A version `late-…` writes a small output and then, once only, fills the disk to the
          // last byte beside it (the output dir's `filler`): the step succeeds, and the worker
          // finds the disk full after it.
          run: [
            "sh",
            "-c",
            [
              'case "$CLAIMWATCH_VERSION" in late-*) ;; *) exec head -c "${CLAIMWATCH_VERSION#*-}" /dev/urandom > "$CLAIMWATCH_WORK/data.bin" ;; esac',
              'echo "$CLAIMWATCH_VERSION" > "$CLAIMWATCH_WORK/version.txt"',
              'root="$CLAIMWATCH_WORK/../.."',
              '[ -e "$root/filled-once" ] && exit 0',
              'touch "$root/filled-once"',
              'cat /dev/zero > "$root/filler" 2>/dev/null',
              'dd if=/dev/zero bs=4096 >> "$root/filler" 2>/dev/null',
              'dd if=/dev/zero bs=1 >> "$root/filler" 2>/dev/null',
              "exit 0",
            ].join("; "),
          ],
        },
      ],
    },
  });
  output = bed.definitions.rebuilds.get("fill")!.outputPath;
  const mounted = mountSmallDisk(output, DISK_BYTES);
  if (typeof mounted === "string") mountRefused = mounted;
  else disk = mounted;
});

after(async () => {
  try {
    await worker?.stop("SIGKILL");
  } finally {
    disk?.unmount();
    await bed?.close();
  }
});

const freeBytes = () => {
  const stats = fs.statfsSync(output);
  return stats.bavail * stats.bsize;
};

/** Builds under builds/ whose bytes no longer hash to their name. */
async function changedBuilds(): Promise<string[]> {
  const builds = path.join(output, "builds");
  const changed: string[] = [];
  for (const name of fs.readdirSync(builds).filter((entry) => !entry.startsWith("."))) {
    if ((await hashDirectory(path.join(builds, name))) !== name) changed.push(name);
  }
  return changed;
}

/** Builds in builds/ (not the fence records and marks beside them). */
const buildNames = () =>
  fs.existsSync(path.join(output, "builds"))
    ? fs
        .readdirSync(path.join(output, "builds"))
        .filter((name) => !name.startsWith("."))
        .sort()
    : [];

/**
 * What a run must not leave in the output dir: work dirs, holding marks, builds moved aside, and
 * the temporary files of `current` and the fence record.
 */
function leftovers(): string[] {
  const work = path.join(output, ".work");
  const builds = path.join(output, "builds");
  return [
    ...(fs.existsSync(work) ? fs.readdirSync(work).map((name) => `.work/${name}`) : []),
    ...(fs.existsSync(builds)
      ? fs
          .readdirSync(builds)
          .filter((name) => /^\.(holding-fence@|changed-|unsynced-)/.test(name))
          .map((name) => `builds/${name}`)
      : []),
    ...fs
      .readdirSync(output)
      .filter((name) => /^\.(current-|published-fence-writing\.|claimwatch-claim-writing\.)/.test(name)),
  ];
}

/** Waits until the job's state is `state` (BullMQ's own word, not a run record's). */
async function jobState(jobId: string, state: string): Promise<void> {
  const deadline = Date.now() + 30_000;
  for (;;) {
    const now = await bed.queue.getJobState(jobId);
    if (now === state) return;
    if (Date.now() > deadline) throw new Error(`job ${jobId} is ${now}, not ${state}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

test("a step that fills the disk fails its run; the published build stays, its space comes back, the next run publishes", async (t) => {
  if (!disk) return t.skip(mountRefused);
  worker = await bed.startWorker();

  const first = await bed.trigger("fill", { version: "a-300000" });
  const published = await bed.waitForRun((r) => r.jobId === first && r.status === "rebuilt", 30_000);
  const currentBefore = await readCurrent(output);
  assert.ok(currentBefore, "current points at the first build");
  const freeAfterFirst = freeBytes();

  const buildsBefore = buildNames();
  // More than the disk has left.
  const filling = await bed.trigger("fill", { version: `b-${freeBytes() + 1_000_000}` });
  const failed = await bed.waitForRun((r) => r.jobId === filling && r.status === "failed", 30_000);
  assert.match(failed.reason ?? "", /^step write exited 1/, "the step's own failure, not the worker's");
  await jobState(filling, "failed");
  assert.equal((await bed.queue.getJob(filling))?.attemptsMade, 1, "a step's exit code 1 is not retried");
  assert.equal((await bed.runsOfJob(filling)).length, 1);
  assert.deepEqual(buildNames(), buildsBefore, "nothing of the failed run reached builds/");

  assert.equal(await readCurrent(output), currentBefore, "current stays at the published build");
  assert.deepEqual(await changedBuilds(), [], "published builds still hash to their names");
  assert.deepEqual(leftovers(), [], "the failed run's work dir is gone");
  assert.ok(
    freeBytes() >= freeAfterFirst - 64 * 1024,
    `the disk got its space back (${freeBytes()} free, ${freeAfterFirst} before the failed run)`,
  );
  const claim = claimName(bed.definitions.rebuilds.get("fill")!.claimPath, undefined);
  assert.equal(await bed.claims.exists(bed.keys.claim(claim)), 0, "no claim left held");
  assert.equal(worker.child.exitCode, null, "the worker is still up");

  const next = await bed.trigger("fill", { version: "c-200000" });
  const rebuilt = await bed.waitForRun((r) => r.jobId === next && r.status === "rebuilt", 30_000);
  assert.notEqual(await readCurrent(output), currentBefore, "current moved to the next build");
  assert.notEqual(rebuilt.buildHash, published.buildHash);
});

test("no room for the worker's own files: the attempt fails as transient, naming the full disk; with room again the same job publishes", async (t) => {
  if (!disk) return t.skip(mountRefused);
  worker ??= await bed.startWorker();
  const currentBefore = await readCurrent(output);

  // Fill the disk to the last page.
  const filler = path.join(output, "filler");
  const fd = fs.openSync(filler, "w");
  try {
    fillToLastByte(fd, [64 * 1024, 4096, 1]);
  } finally {
    fs.closeSync(fd);
  }
  assert.equal(freeBytes(), 0, "the disk is full");

  const jobId = await bed.trigger("fill", { version: "d-1000" });
  const refused = await bed.waitForRun((r) => r.jobId === jobId && r.status === "failed", 30_000);
  assert.match(refused.reason ?? "", /^transient: .*(ENOSPC|no space left on device)/i);
  assert.ok(refused.reason?.includes(output), `the reason names where the disk is full: ${refused.reason}`);
  assert.equal(await readCurrent(output), currentBefore, "nothing was published meanwhile");
  // No attempt in flight (the queue paused, longer than the backoff and a failing attempt), so
  // what the refused attempts left, they left for good: nothing, not even a holding mark.
  await bed.queue.pause();
  await new Promise((resolve) => setTimeout(resolve, 2_500));
  assert.deepEqual(leftovers(), [], "the refused attempts left no work dir, holding mark or temporary file");
  const waiting = await bed.queue.getJobState(jobId);
  assert.ok(["delayed", "waiting", "paused"].includes(waiting), `the job waits for its next attempt (${waiting})`);

  fs.rmSync(filler);
  await bed.queue.resume();
  const rebuilt = await bed.waitForRun((r) => r.jobId === jobId && r.status === "rebuilt", 30_000);
  const runs = await bed.runsOfJob(jobId);
  assert.ok(runs.length >= 2, "a later attempt of the same job");
  assert.ok(
    runs.filter((r) => r.id !== rebuilt.id).every((r) => r.status === "failed" && r.reason?.startsWith("transient:")),
    JSON.stringify(runs.map((r) => [r.attempt, r.status, r.reason])),
  );
  assert.notEqual(await readCurrent(output), currentBefore, "current moved to the new build");
  assert.deepEqual(leftovers(), [], "no work dir, holding mark or half-written file left");
  assert.deepEqual(await changedBuilds(), []);
  assert.equal(worker.child.exitCode, null, "the worker is still up");
});

test("the disk fills after the steps, before the publish: current stays; with room again the same job publishes", async (t) => {
  if (!disk) return t.skip(mountRefused);
  worker ??= await bed.startWorker();
  const currentBefore = await readCurrent(output);
  assert.ok(currentBefore, "a build is published (the tests above)");
  const filler = path.join(output, "filler");

  const jobId = await bed.trigger("fill", { version: "late-e" });
  const refused = await bed.waitForRun((r) => r.jobId === jobId && r.status === "failed", 30_000);
  assert.match(refused.reason ?? "", /^transient: .*(ENOSPC|no space left on device)/i);
  assert.ok(fs.existsSync(filler), "the step filled the disk");
  assert.match(
    refused.reason ?? "",
    /could not be recorded on disk .*: not durable, so this attempt left current where it was/,
  );
  assert.equal(await readCurrent(output), currentBefore, "the refused publish left current where it was");
  assert.deepEqual(await changedBuilds(), [], "every build under builds/ hashes to its name");
  await bed.queue.pause();
  await new Promise((resolve) => setTimeout(resolve, 2_500));
  assert.equal(await readCurrent(output), currentBefore, "nothing was published while the disk was full");

  fs.rmSync(filler);
  await bed.queue.resume();
  // A later attempt publishes — or, on a machine slow enough that repair (10 s after the publish)
  // came first and made the refused attempt's build current, skips as already rebuilt by it.
  const ended = await bed.waitForRun(
    (r) => r.jobId === jobId && (r.status === "rebuilt" || (r.status === "skipped" && r.attempt > refused.attempt)),
    30_000,
  );
  const rebuilt =
    ended.status === "rebuilt"
      ? ended
      : {
          ...ended,
          buildHash: (await bed.runsOfJob(jobId)).find((r) => r.id === refused.id)?.madeCurrentLater?.buildHash ?? null,
        };
  assert.notEqual(await readCurrent(output), currentBefore, "current moved to the new build");
  assert.equal(await readCurrent(output), rebuilt.buildHash);
  const runs = (await bed.runsOfJob(jobId)).filter((r) => r.status !== "skipped");
  assert.ok(
    runs.filter((r) => r.id !== rebuilt.id).every((r) => r.status === "failed" && r.reason?.startsWith("transient:")),
    JSON.stringify(runs.map((r) => [r.attempt, r.status, r.reason])),
  );
  assert.deepEqual(leftovers(), [], "no work dir, holding mark or half-written file left");
  assert.deepEqual(await changedBuilds(), []);
  assert.equal(worker.child.exitCode, null, "the worker is still up");
});

test("a publish whose fence record the full disk refused, made current later by repair: the failed run's record says so, and its version counts as rebuilt", async (t) => {
  if (!disk) return t.skip(mountRefused);
  worker ??= await bed.startWorker();
  const filler = path.join(output, "filler");
  fs.rmSync(path.join(output, "filled-once"), { force: true }); // the step fills the disk once more

  const jobId = await bed.trigger("fill", { version: "late-g" });
  const refused = await bed.waitForRun((r) => r.jobId === jobId && r.status === "failed", 30_000);
  assert.match(
    refused.reason ?? "",
    /could not be recorded on disk .*: not durable, so this attempt left current where it was/,
  );
  // No next attempt (the queue paused): the disk gets room again, and repair finishes the publish.
  await bed.queue.pause();
  try {
    fs.rmSync(filler);
    const noted = await bed.waitForRun(
      (r) => r.id === refused.id && r.madeCurrentLater !== null && r.madeCurrentLater !== undefined,
      60_000,
      "the failed run's record saying its build was made current",
    );
    assert.equal(noted.status, "failed", "a final status never changes");
    assert.equal(await readCurrent(output), noted.madeCurrentLater!.buildHash, "current serves its build");
    // Its version is the lane's now: another version's request builds (RUN_NOTE_MADE_CURRENT).
    assert.deepEqual(
      await bed.main.hmget(
        bed.keys.rebuiltNow(claimName(bed.definitions.rebuilds.get("fill")!.claimPath)),
        "fence",
        "key",
      ),
      [String(noted.madeCurrentLater!.fence), bed.keys.idempotency(idempotencyKey("fill", undefined, "late-g"))],
    );
    assert.equal(
      noted.madeCurrentLater!.buildHash,
      await bed.claims.hget(bed.keys.published(claimName(bed.definitions.rebuilds.get("fill")!.claimPath)), "value"),
    );
  } finally {
    await bed.queue.resume();
  }
  // Its version counts as rebuilt by it: the job's next attempt skips.
  const next = await bed.waitForRun((r) => r.jobId === jobId && r.attempt > refused.attempt, 30_000);
  const settled = await bed.waitForRun(
    (r) => r.id === next.id && r.status !== "running" && r.status !== "queued",
    30_000,
  );
  assert.equal(settled.status, "skipped", `${settled.status}: ${settled.reason}`);
  assert.match(settled.reason ?? "", new RegExp(`already rebuilt by run ${refused.id}`));
});
