/**
 * Issue 14, defect 6: a rebuilt version is marked rebuilt (its idempotency key) before the claim
 * is released, so a duplicate that acquires the freed claim finds the key and skips instead of
 * building again. Watched with MONITOR on the real Redis: the order the server executed them.
 * And what an attempt reads right around its acquire: the idempotency re-check after the grant,
 * the durable published fence right before each acquire.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import fs from "node:fs/promises";
import path from "node:path";
import { after, before, test } from "node:test";
import { acquireClaim, claimName, readPublished, releaseClaim } from "../../lib/claims";
import { outputDirOf } from "../../lib/rebuilds/definitions";
import { readCurrent } from "../../lib/rebuilds/output";
import { repairCurrentLinks } from "../../lib/rebuilds/repair";
import { PRUNING_VERSION } from "../../lib/rebuilds/prune";
import { pointCurrentAtRecord, readPublishedFence, recordPublishedFence } from "../../lib/rebuilds/published-fence";
import { readRun } from "../../lib/runs/records";
import { runRebuild, type RebuildDeps } from "../../lib/rebuilds/run-rebuild";
import { idempotencyKey } from "../../lib/rebuilds/version";
import { markRebuilt } from "../support/runs";
import { createTestBed, rebuildDepsOf, type TestBed } from "../support/stack";

let bed: TestBed;
let deps: RebuildDeps;
before(async () => {
  bed = await createTestBed({
    quick: {
      output: "out/quick",
      claim: { ttl: "4s", refreshEvery: "1s" },
      steps: [{ name: "write", run: ["sh", "-c", 'echo "$CLAIMWATCH_VERSION" > "$CLAIMWATCH_WORK/v"'] }],
    },
    // Its step plays another holder that the claims Redis granted this same fence (it lost
    // writes) and that recorded it first, with its own build, beside the output.
    twice: {
      output: "out/twice",
      claim: { ttl: "4s", refreshEvery: "1s" },
      steps: [
        {
          name: "other-holder-records-first",
          run: [
            "sh",
            "-c",
            `echo "$CLAIMWATCH_VERSION" > "$CLAIMWATCH_WORK/v" && printf '${"e".repeat(32)}' > "$CLAIMWATCH_WORK/../../.published-fence@$CLAIMWATCH_FENCE"`,
          ],
        },
      ],
    },
  });
  deps = rebuildDepsOf(bed);
});
after(() => bed.close());

/**
 * MONITOR through `redis-cli` (a process of its own, stopped by PID): ioredis's monitor mode
 * once mistook a monitor line for a reply ("Command queue state error") in CI.
 */
async function startMonitor(url: string): Promise<{ seen: string[][]; stop: () => void }> {
  const { hostname, port } = new URL(url);
  const child = spawn("redis-cli", ["-h", hostname, "-p", port, "monitor"], { stdio: ["ignore", "pipe", "pipe"] });
  const seen: string[][] = [];
  let rest = "";
  let ready: () => void = () => {};
  const started = new Promise<void>((resolve) => (ready = resolve));
  child.stdout.setEncoding("utf8");
  child.stdout.on("data", (chunk: string) => {
    const lines = (rest + chunk).split("\n");
    rest = lines.pop() ?? "";
    for (const line of lines) {
      if (line.trim() === "OK") ready();
      // 1796186097.236051 [0 127.0.0.1:41770] "set" "key" "value"
      const args = [...line.matchAll(/"((?:[^"\\]|\\.)*)"/g)].map((m) => m[1]!);
      if (args.length > 0) seen.push(args);
    }
  });
  await started;
  return { seen, stop: () => child.kill("SIGKILL") };
}

/** One attempt (attempt 1) of `rebuild` at `version`, run in this process as a worker would. */
function rebuildOnce(jobId: string, rebuild: string, version: string) {
  return runRebuild(deps, {
    id: jobId,
    attempt: 1,
    createdAt: Date.now(),
    data: { rebuild, version, trigger: "api" },
    signal: new AbortController().signal,
  });
}

test("the idempotency key is set before the claim is released", async () => {
  const { seen, stop } = await startMonitor(bed.redis.url);
  try {
    const outcome = await rebuildOnce("order-1", "quick", "o1");
    assert.equal(outcome.status, "rebuilt");
    const idem = bed.keys.idempotency(idempotencyKey("quick", undefined, "o1"));
    const claim = bed.keys.claim(claimName(bed.definitions.rebuilds.get("quick")!.claimPath));
    // MONITOR also lists what scripts run: the release script's DEL of the claim, the run
    // script's (or a plain) SET of the idempotency key.
    const released = () => seen.findIndex((args) => args[0]?.toLowerCase() === "del" && args[1] === claim);
    // MONITOR lines arrive a little after the commands ran: wait until the release was seen.
    for (let i = 0; i < 200 && released() < 0; i++) await new Promise((r) => setTimeout(r, 25));
    const marked = seen.findIndex((args) => args[0]?.toLowerCase() === "set" && args[1] === idem);
    assert.ok(released() >= 0, "the release was seen");
    assert.ok(marked >= 0, "the idempotency key was set");
    assert.ok(marked < released(), `key set at command ${marked}, claim released at ${released()}`);
  } finally {
    stop();
  }
});

/**
 * Runs an attempt of `quick` at `version` while "another run" holds its claim (as a pruner: the
 * attempt waits for it instead of deferring); once the attempt's record is running, `meanwhile`
 * runs, then the claim is released and the attempt's outcome returned.
 */
async function attemptWaitingForClaim(jobId: string, version: string, meanwhile: () => Promise<void>) {
  const name = claimName(bed.definitions.rebuilds.get("quick")!.claimPath);
  const other = await acquireClaim(
    bed.claims,
    bed.keys,
    name,
    { workerId: "w-other", version: PRUNING_VERSION, trail: false },
    { ttlMs: 10_000, refreshEveryMs: 2_000 },
  );
  assert.equal(other.status, "acquired");
  if (other.status !== "acquired") throw new Error("not acquired");
  const attempt = rebuildOnce(jobId, "quick", version);
  for (let i = 0; i < 200 && (await readRun(bed.main, bed.keys, `${jobId}-a1`))?.status !== "running"; i++) {
    await new Promise((r) => setTimeout(r, 10));
  }
  assert.equal((await readRun(bed.main, bed.keys, `${jobId}-a1`))?.status, "running", "began, waiting for the claim");
  await new Promise((r) => setTimeout(r, 100));
  await meanwhile();
  assert.equal((await releaseClaim(bed.claims, bed.keys, name, other.token)).status, "released");
  return attempt;
}

test("the re-check is asked once the claim is granted: a run that finished while this one waited for the claim is found, nothing is built", async () => {
  // The other run marks the version rebuilt (its final write under its claim), then releases the claim.
  const outcome = await attemptWaitingForClaim("order-2", "o2", async () => {
    await markRebuilt(
      bed.main,
      bed.keys,
      { rebuild: "quick", version: "o2", claim: claimName(bed.definitions.rebuilds.get("quick")!.claimPath) },
      "finished-elsewhere-a1",
    );
  });
  assert.equal(outcome.status, "skipped");
  const record = await readRun(bed.main, bed.keys, "order-2-a1");
  assert.equal(record?.status, "skipped");
  assert.match(record?.reason ?? "", /already rebuilt by run finished-elsewhere-a1/);
  assert.equal(record?.buildHash ?? null, null, "nothing was built");
});

test("a version found rebuilt under the claim is skipped even when its work dir cannot be made (a failing disk)", async () => {
  const outputDir = outputDirOf(bed.definitions.rebuilds.get("quick")!, undefined);
  const workRoot = path.join(outputDir, ".work");
  const saved = `${workRoot}.saved`;
  await fs.rename(workRoot, saved).catch(() => {});
  try {
    const outcome = await attemptWaitingForClaim("order-4", "o4", async () => {
      await fs.writeFile(workRoot, "not a directory"); // mkdir under it fails (ENOTDIR)
      await markRebuilt(
        bed.main,
        bed.keys,
        { rebuild: "quick", version: "o4", claim: claimName(bed.definitions.rebuilds.get("quick")!.claimPath) },
        "finished-elsewhere-a1",
      );
    });
    assert.equal(outcome.status, "skipped");
    assert.equal((await readRun(bed.main, bed.keys, "order-4-a1"))?.status, "skipped");
  } finally {
    await fs.rm(workRoot, { force: true });
    await fs.rename(saved, workRoot).catch(() => {});
  }
});

test("the published fence on disk is read right before each acquire: a publish made while this attempt waited, and forgotten by the claims Redis, is never granted again", async () => {
  const definition = bed.definitions.rebuilds.get("quick")!;
  const outputDir = outputDirOf(definition, undefined);
  // Meanwhile a holder published fence 50 and recorded it durably; the claims Redis then lost
  // that grant and publish (its counter is far below).
  const outcome = await attemptWaitingForClaim("order-3", "o3", async () => {
    const counter = Number((await bed.claims.get(bed.keys.claimFence(claimName(definition.claimPath)))) ?? 0);
    assert.ok(counter < 50, `counter ${counter}`);
    assert.deepEqual(await recordPublishedFence(outputDir, 50, "a".repeat(32)), { status: "recorded" });
  });
  assert.equal(outcome.status, "rebuilt");
  if (outcome.status !== "rebuilt") return;
  assert.ok(outcome.fence > 50, `granted fence ${outcome.fence} is above the recorded 50`);
  assert.deepEqual(await readPublishedFence(outputDir), { fence: outcome.fence, hash: outcome.buildHash });
});

test("a fence recorded with another build (a fence granted twice) keeps its build: current does not follow the second", async () => {
  const outputDir = path.join(bed.dir, "fence-twice");
  await fs.mkdir(outputDir, { recursive: true });
  const nine = { fence: 9, hash: "b".repeat(32) };
  assert.deepEqual(await recordPublishedFence(outputDir, 9, "b".repeat(32)), { status: "recorded" });
  assert.deepEqual(
    await recordPublishedFence(outputDir, 9, "b".repeat(32)),
    { status: "recorded" },
    "the same publish, asked again",
  );
  assert.deepEqual(await recordPublishedFence(outputDir, 9, "c".repeat(32)), { status: "fence-reused", known: nine });
  assert.deepEqual(await recordPublishedFence(outputDir, 8, "d".repeat(32)), { status: "newer", known: nine });
  assert.deepEqual(await readPublishedFence(outputDir), { fence: 9, hash: "b".repeat(32) });
});

test("records made side by side never leave the record below the highest fence (each fence its own file, never overwritten)", async () => {
  // Two writers that both read the record before either wrote: a paused publisher and a newer
  // one, or a publisher and a repair. With one file replaced by rename, the later rename won even
  // when it carried the lower fence (so it failed, 35 of 60 outputs in three runs, before the
  // record was split into a file per fence).
  const outcomes = await Promise.all(
    Array.from({ length: 20 }, async (_, i) => {
      const outputDir = path.join(bed.dir, `fence-race-${i}`);
      await fs.mkdir(outputDir, { recursive: true });
      await Promise.all([
        recordPublishedFence(outputDir, 11, "b".repeat(32)),
        recordPublishedFence(outputDir, 10, "a".repeat(32)),
      ]);
      return readPublishedFence(outputDir);
    }),
  );
  const lowered = outcomes.filter((o) => o?.fence !== 11 || o.hash !== "b".repeat(32));
  assert.deepEqual(lowered, [], "every output's record says fence 11 and its build");
});

test("the single .published-fence file of earlier versions is still read, and goes once a higher fence is recorded", async () => {
  const outputDir = path.join(bed.dir, "fence-legacy");
  await fs.mkdir(outputDir, { recursive: true });
  await fs.writeFile(path.join(outputDir, ".published-fence"), JSON.stringify({ fence: 7, hash: "c".repeat(32) }));
  const seven = { fence: 7, hash: "c".repeat(32) };
  assert.deepEqual(await readPublishedFence(outputDir), seven);
  assert.deepEqual(await recordPublishedFence(outputDir, 7, "d".repeat(32)), { status: "fence-reused", known: seven });
  assert.deepEqual(await recordPublishedFence(outputDir, 6, "d".repeat(32)), { status: "newer", known: seven });
  assert.deepEqual(await recordPublishedFence(outputDir, 8, "d".repeat(32)), { status: "recorded" });
  assert.deepEqual(await readPublishedFence(outputDir), { fence: 8, hash: "d".repeat(32) });
  // Kept up to date for workers of the earlier version (a rolling deploy): they read only it.
  // (And the lock its writers take turns with.)
  assert.deepEqual((await fs.readdir(outputDir)).sort(), [
    ".published-fence",
    ".published-fence@8",
    ".published-list.lock",
  ]);
  assert.deepEqual(JSON.parse(await fs.readFile(path.join(outputDir, ".published-fence"), "utf8")), {
    fence: 8,
    hash: "d".repeat(32),
  });
});

test("the legacy file next to the entries: an entry wins a tie, a legacy-only fence gets its entry, an unreadable legacy file blocks nothing", async () => {
  const tie = path.join(bed.dir, "fence-legacy-tie");
  await fs.mkdir(tie, { recursive: true });
  assert.deepEqual(await recordPublishedFence(tie, 5, "a".repeat(32)), { status: "recorded" });
  // A worker of the earlier version, granted fence 5 again by a claims Redis that lost writes.
  await fs.writeFile(path.join(tie, ".published-fence"), JSON.stringify({ fence: 5, hash: "b".repeat(32) }));
  assert.deepEqual(await readPublishedFence(tie), { fence: 5, hash: "a".repeat(32) }, "the first recorded build");
  // An entry that cannot be read (empty: a crash between its create and its write, on a
  // filesystem without hard links), tied with the legacy file: the legacy file names the build.
  await fs.writeFile(path.join(tie, ".published-fence@9"), "");
  await fs.writeFile(path.join(tie, ".published-fence"), JSON.stringify({ fence: 9, hash: "e".repeat(32) }));
  assert.deepEqual(await readPublishedFence(tie), { fence: 9, hash: "e".repeat(32) });

  const legacyOnly = path.join(bed.dir, "fence-legacy-only");
  await fs.mkdir(legacyOnly, { recursive: true });
  await fs.writeFile(path.join(legacyOnly, ".published-fence"), JSON.stringify({ fence: 7, hash: "c".repeat(32) }));
  assert.deepEqual(await recordPublishedFence(legacyOnly, 7, "c".repeat(32)), { status: "recorded" });
  assert.ok((await fs.readdir(legacyOnly)).includes(".published-fence@7"), "the fence has its own entry now");

  const unreadable = path.join(bed.dir, "fence-legacy-unreadable");
  await fs.mkdir(path.join(unreadable, ".published-fence"), { recursive: true }); // EISDIR on every read
  assert.equal(await readPublishedFence(unreadable), null);
  assert.deepEqual(await recordPublishedFence(unreadable, 3, "d".repeat(32)), { status: "recorded" });
  assert.deepEqual(await readPublishedFence(unreadable), { fence: 3, hash: "d".repeat(32) });
});

test("a reader that listed the record's files before a newer fence was recorded and the lower file removed reads the newer one, not a record without its build", async () => {
  // The reader is held between its listing and its read (as a paused or slow process would
  // be): a writer records fence 6 and removes 5 meanwhile. Before the reader listed again, it
  // returned fence 5 with the hash "" (this test failed so) — which made a publisher of fence 5
  // with that very build read "fence-reused" (helper-41's finding 3).
  const outputDir = path.join(bed.dir, "fence-reader-held");
  await fs.mkdir(outputDir, { recursive: true });
  assert.deepEqual(await recordPublishedFence(outputDir, 5, "a".repeat(32)), { status: "recorded" });
  const realReaddir = fs.readdir;
  let held = false;
  (fs as { readdir: unknown }).readdir = async (...args: Parameters<typeof realReaddir>) => {
    const listing = await (realReaddir as (...a: unknown[]) => Promise<unknown>)(...args);
    if (!held && args[0] === outputDir) {
      held = true;
      (fs as { readdir: unknown }).readdir = realReaddir;
      assert.deepEqual(await recordPublishedFence(outputDir, 6, "b".repeat(32)), { status: "recorded" });
      // The legacy file (rewritten on every record) would give fence 6 as well: the entries alone.
      await fs.rm(path.join(outputDir, ".published-fence"));
    }
    return listing;
  };
  try {
    assert.deepEqual(await readPublishedFence(outputDir), { fence: 6, hash: "b".repeat(32) });
  } finally {
    (fs as { readdir: unknown }).readdir = realReaddir;
  }
  assert.ok(held, "the reader was held between its listing and its read");
});

test("current follows a newer record it passed over: a swap made after a newer publisher's swap is undone by the one who made it", async () => {
  const outputDir = path.join(bed.dir, "fence-swap-order");
  const older = "a".repeat(32);
  const newer = "b".repeat(32);
  for (const hash of [older, newer]) await fs.mkdir(path.join(outputDir, "builds", hash), { recursive: true });
  // The newer publisher recorded fence 6 and pointed current at its build; the holder of fence 5
  // (or a repair of pointer 5), which read the record before, swaps now.
  assert.deepEqual(await recordPublishedFence(outputDir, 6, newer), { status: "recorded" });
  await pointCurrentAtRecord(outputDir, 6, newer);
  await pointCurrentAtRecord(outputDir, 5, older);
  assert.equal(await readCurrent(outputDir), newer, "current is back on fence 6's build");
});

test("a fence granted twice: the run whose build was recorded second is not published, not marked rebuilt, and runs again; repair puts Redis back on the recorded build", async () => {
  const definition = bed.definitions.rebuilds.get("twice")!;
  const outputDir = outputDirOf(definition, undefined);
  const name = claimName(definition.claimPath);
  const outcome = await rebuildOnce("twice-1", "twice", "t1");
  assert.equal(outcome.status, "deferred", JSON.stringify(outcome));
  const record = await readRun(bed.main, bed.keys, "twice-1-a1");
  assert.equal(record?.status, "deferred");
  assert.match(record?.reason ?? "", /granted twice/);
  assert.equal(await readCurrent(outputDir), null, "current never followed the second build");
  assert.equal(await bed.main.get(bed.keys.idempotency(idempotencyKey("twice", undefined, "t1"))), null);
  const recorded = await readPublishedFence(outputDir);
  assert.equal(recorded?.hash, "e".repeat(32));
  // The fenced publish went through in Redis; repair puts the pointer back on the recorded build.
  assert.notEqual((await readPublished(bed.claims, bed.keys, name))?.value, recorded?.hash);
  const lines = await repairCurrentLinks(bed.claims, bed.keys, bed.definitions);
  assert.ok(
    lines.some((line) => line.startsWith("restored the claims Redis pointer")),
    lines.join("\n"),
  );
  const pointer = await readPublished(bed.claims, bed.keys, name);
  assert.deepEqual([pointer?.fence, pointer?.value], [recorded?.fence, recorded?.hash]);
  assert.equal(await readCurrent(outputDir), null, "and current is not moved to the build that lost");
});
