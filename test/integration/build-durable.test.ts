/**
 * A published build is on disk before it is published: every file and directory of the work tree
 * is fsynced before the rename into `builds/<hash>`, `builds/` after it, and the output directory
 * after `current` is swapped (a machine crash must not leave a published name with empty files,
 * or bring an older `current` back). Seen from outside: the promote runs in a child under strace,
 * whose log gives the order of fsync and rename calls and the path of every fsynced descriptor.
 * A failing disk (fsync answering EIO, injected by strace) fails the promote: nothing is moved
 * into `builds/` and `current` is not touched; an existing build that cannot be synced is moved
 * aside; a failure after the publish (the fence record, the swap) leaves the attempt recorded as
 * published, and `current` where it was until repair can move it with the fence on disk.
 */
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, test, type TestContext } from "node:test";
import { fileURLToPath } from "node:url";
import { claimName, forceReleaseClaim, readClaim, readPublished } from "../../lib/claims";
import { changedBuildProblems, checkPublishedBuilds, recordChangedBuild } from "../../lib/rebuilds/build-integrity";
import { BUILD_HASH, readCurrent } from "../../lib/rebuilds/output";
import { readPublishedFence, readPublishedJobs } from "../../lib/rebuilds/published-fence";
import { runIdOf } from "../../lib/runs/types";
import { closeRedis, createRedis } from "../../lib/redis/client";
import { redisKeys } from "../../lib/redis/keys";
import { createTestBed } from "../support/stack";
import { startTestRedis, stopTestRedis, uniquePrefix } from "../support/redis";
import { injectInto } from "../support/strace";
import { until } from "../support/until";
import { currentLagProblems } from "../../lib/rebuilds/current-lag";
import { serverNow } from "../../lib/redis/time";

const HOST = fileURLToPath(new URL("../support/promote-host.ts", import.meta.url));
const RECORD_FENCE_HOST = fileURLToPath(new URL("../support/record-fence-host.ts", import.meta.url));

/** strace's arguments for RECORD_FENCE_HOST recording `fence` for `runId`, its calls failed or held up as `inject` says. */
const recordFenceHostArgv = (inject: string[], outputDir: string, fence: number, hash: string, runId: string) => [
  "-f",
  "-qq",
  "-o",
  "/dev/null",
  ...inject,
  process.execPath,
  "--import",
  "tsx",
  RECORD_FENCE_HOST,
  outputDir,
  String(fence),
  hash,
  runId,
];
let root = "";

before(() => {
  root = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), "claimwatch-durable-")));
});
after(() => {
  fs.rmSync(root, { recursive: true, force: true });
});

/** A work tree of nested files (more per directory than are synced at once), an empty directory and a symlink. */
function makeWorkTree(
  outputDir: string,
  runId: string,
  content = runId,
): { workDir: string; files: string[]; dirs: string[] } {
  const workDir = path.join(outputDir, ".work", runId);
  const files: string[] = [];
  const dirs = [workDir];
  const add = (rel: string, body: string) => {
    const full = path.join(workDir, rel);
    fs.mkdirSync(path.dirname(full), { recursive: true });
    fs.writeFileSync(full, body);
    files.push(full);
  };
  add("index.json", `{"run":"${content}"}`);
  for (let i = 0; i < 12; i++) add(`tiles/3/${i}.pbf`, `tile ${i} of ${content}`.repeat(50));
  add("tiles/meta/deeper/info.txt", "nested");
  for (const rel of ["tiles", "tiles/3", "tiles/meta", "tiles/meta/deeper", "empty"]) {
    fs.mkdirSync(path.join(workDir, rel), { recursive: true });
    dirs.push(path.join(workDir, rel));
  }
  fs.symlinkSync("index.json", path.join(workDir, "latest.json"));
  return { workDir, files, dirs };
}

/**
 * Makes every fsync on `paths` fail with EIO in every thread of the worker `pid` (strace
 * `inject`), from one second on (attached); the tracer is stopped with the test.
 */
async function failFsyncsOf(t: TestContext, pid: number, paths: string[]): Promise<() => void> {
  return injectInto(t, pid, ["-e", "trace=fsync", "-e", "inject=fsync:error=EIO", ...paths.flatMap((p) => ["-P", p])]);
}

interface Traced {
  stdout: string;
  /** The traced calls in order: `fsync <path>` or `rename <from> -> <to>` (successful ones only). */
  calls: string[];
}

function promoteTraced(outputDir: string, workDir: string, inject: string[] = []): Traced {
  const log = path.join(root, `strace-${path.basename(workDir)}.log`);
  const child = spawnSync(
    "strace",
    [
      "-f",
      "-qq",
      "-y",
      "-o",
      log,
      "-e",
      "trace=fsync,fdatasync,rename,renameat,renameat2,openat",
      ...inject,
      process.execPath,
      "--import",
      "tsx",
      HOST,
      outputDir,
      workDir,
    ],
    { encoding: "utf8", timeout: 120_000 },
  );
  assert.equal(child.status, 0, `the promote host failed: ${child.stderr}`);
  // Each call is counted when it completed: a call another thread interrupts is logged in two
  // parts (`fsync(19</path> <unfinished ...>`, later `<... fsync resumed>) = 0` by the same pid).
  const calls: string[] = [];
  const pending = new Map<string, string>();
  for (const line of fs.readFileSync(log, "utf8").split("\n")) {
    const pid = line.split(/\s+/, 1)[0]!;
    const fsync = /\b(?:fsync|fdatasync)\(\d+<([^>]*)>(.*)$/.exec(line);
    const rename = /\brename(?:at2?)?\([^"]*"([^"]+)",[^"]*"([^"]+)"(.*)$/.exec(line);
    const call = fsync ? `fsync ${fsync[1]}` : rename ? `rename ${rename[1]} -> ${rename[2]}` : null;
    const rest = fsync?.[2] ?? rename?.[3] ?? "";
    if (call && rest.includes("<unfinished ...>")) pending.set(pid, call);
    else if (call && /\) += 0$/.test(rest)) calls.push(call);
    else if (/<\.\.\. (?:fsync|fdatasync|rename|renameat2?) resumed>.*\) += 0$/.test(line) && pending.has(pid)) {
      calls.push(pending.get(pid)!);
      pending.delete(pid);
    }
  }
  return { stdout: child.stdout, calls };
}

test("every file and directory of a build is fsynced before it is renamed into builds/, builds/ after it, the output after current moves", () => {
  const outputDir = path.join(root, "out");
  const { workDir, files, dirs } = makeWorkTree(outputDir, "r1-a1");
  const { stdout, calls } = promoteTraced(outputDir, workDir);
  const hash = /^PROMOTED (\S+)$/m.exec(stdout)?.[1];
  assert.ok(hash && BUILD_HASH.test(hash), `promoted: ${stdout}`);
  const target = path.join(outputDir, "builds", hash);

  const promoted = calls.indexOf(`rename ${workDir} -> ${target}`);
  assert.ok(promoted >= 0, `the work directory was renamed into builds/: ${calls.join("\n")}`);
  const synced = new Set(
    calls
      .slice(0, promoted)
      .filter((call) => call.startsWith("fsync "))
      .map((c) => c.slice(6)),
  );
  for (const entry of [...files, ...dirs]) {
    assert.ok(
      synced.has(entry),
      `${path.relative(workDir, entry) || "the work directory"} was fsynced before the rename`,
    );
  }
  assert.ok(
    calls.slice(promoted + 1).includes(`fsync ${path.join(outputDir, "builds")}`),
    "builds/ was fsynced after the rename",
  );
  const swapped = calls.findIndex(
    (call) => call.startsWith("rename ") && call.endsWith(` -> ${path.join(outputDir, "current")}`),
  );
  assert.ok(swapped > promoted, "current was swapped after the promote");
  assert.ok(calls.slice(swapped + 1).includes(`fsync ${outputDir}`), "the output directory was fsynced after the swap");
  assert.equal(fs.readlinkSync(path.join(outputDir, "current")), path.join("builds", hash));
});

test("a disk whose fsync fails: the promote fails, nothing is moved into builds/, current stays", () => {
  const outputDir = path.join(root, "failing");
  const first = makeWorkTree(outputDir, "r2-a1");
  const published = promoteTraced(outputDir, first.workDir);
  const publishedHash = /^PROMOTED (\S+)$/m.exec(published.stdout)?.[1];
  assert.ok(publishedHash, `the first build was promoted: ${published.stdout}`);

  const second = makeWorkTree(outputDir, "r3-a1");
  const { stdout, calls } = promoteTraced(outputDir, second.workDir, ["-e", "inject=fsync:error=EIO:when=3"]);
  assert.match(stdout, /^FAILED EIO /m, "the promote reports the disk's error");
  assert.ok(!calls.some((call) => call.startsWith(`rename ${second.workDir} `)), "the work tree was not renamed");
  assert.deepEqual(
    fs.readdirSync(path.join(outputDir, "builds")).filter((name) => BUILD_HASH.test(name)),
    [publishedHash],
    "builds/ holds only the build published before",
  );
  assert.equal(fs.readlinkSync(path.join(outputDir, "current")), path.join("builds", publishedHash));
});

test("a repeat whose bytes are published already: the build it publishes is fsynced too (a promote a crash cut off after its rename)", () => {
  const outputDir = path.join(root, "repeat");
  const first = makeWorkTree(outputDir, "r4-a1", "same");
  const hash = /^PROMOTED (\S+)$/m.exec(promoteTraced(outputDir, first.workDir).stdout)?.[1];
  assert.ok(hash, "the first build was promoted");
  const target = path.join(outputDir, "builds", hash);

  const repeat = makeWorkTree(outputDir, "r5-a1", "same");
  const { stdout, calls } = promoteTraced(outputDir, repeat.workDir);
  assert.equal(/^PROMOTED (\S+)$/m.exec(stdout)?.[1], hash, "the repeat hashes to the same build");
  assert.ok(!fs.existsSync(repeat.workDir), "the repeat's work directory was dropped");
  const synced = new Set(calls.filter((call) => call.startsWith("fsync ")).map((call) => call.slice(6)));
  for (const entry of [...first.files, ...first.dirs]) {
    const published = path.join(target, path.relative(first.workDir, entry));
    assert.ok(synced.has(published), `${path.relative(outputDir, published)} was fsynced`);
  }
  assert.ok(synced.has(path.join(outputDir, "builds")), "builds/ was fsynced");
});

test("a repeat whose existing build cannot be synced (fsync EIO: a lost write) moves it aside and puts its own synced bytes in its place, unless current points at it; other errors move nothing", () => {
  const outputDir = path.join(root, "unsynced");
  const first = makeWorkTree(outputDir, "r6-a1", "same");
  const hash = /^PROMOTED (\S+)$/m.exec(promoteTraced(outputDir, first.workDir).stdout)?.[1];
  assert.ok(hash, "the first build was promoted");
  const target = path.join(outputDir, "builds", hash);
  const before = fs.statSync(target).ino;
  const failingSync = ["-e", "inject=fsync:error=EIO", "-P", path.join(target, "index.json")];
  const asideNow = () =>
    fs.readdirSync(path.join(outputDir, "builds")).filter((name) => name.startsWith(`.unsynced-${hash}-`));

  // current points at it: it stays where its readers find it; the attempt fails.
  const whileCurrent = promoteTraced(outputDir, makeWorkTree(outputDir, "r7-a1", "same").workDir, failingSync);
  assert.match(whileCurrent.stdout, /^FAILED EIO /m);
  assert.equal(fs.statSync(target).ino, before, "the build current points at was not moved");
  assert.deepEqual(asideNow(), []);

  // Not readable (EACCES): no evidence against its bytes; the attempt fails, nothing moves.
  const other = /^PROMOTED (\S+)$/m.exec(
    promoteTraced(outputDir, makeWorkTree(outputDir, "r8-a1", "other").workDir).stdout,
  )?.[1];
  assert.ok(other && other !== hash, "current moved to another build");
  const denied = promoteTraced(outputDir, makeWorkTree(outputDir, "r9-a1", "same").workDir, [
    "-e",
    "inject=openat:error=EACCES",
    "-P",
    path.join(target, "index.json"),
  ]);
  assert.match(denied.stdout, /^FAILED EACCES /m);
  assert.equal(fs.statSync(target).ino, before, "an unreadable build is not moved");
  assert.deepEqual(asideNow(), []);

  // Linux reports a lost write to one fsync only: a later one would say "on disk" of bytes that
  // are not. So a build whose sync failed is not trusted again: moved aside, replaced.
  const { stdout } = promoteTraced(outputDir, makeWorkTree(outputDir, "r10-a1", "same").workDir, failingSync);
  assert.equal(/^PROMOTED (\S+)$/m.exec(stdout)?.[1], hash, `the repeat is promoted: ${stdout}`);
  assert.notEqual(fs.statSync(target).ino, before, "builds/<hash> is the repeat's tree now");
  assert.equal(asideNow().length, 1, "the unsynced build was moved aside");
  assert.equal(fs.readFileSync(path.join(target, "index.json"), "utf8"), '{"run":"same"}');
});

/** A step's wait for `<output>/.gate` (made by the test) before it writes. */
const GATED =
  ': > "$CLAIMWATCH_WORK/../../.step-started"; while [ ! -e "$CLAIMWATCH_WORK/../../.gate" ]; do sleep 0.05; done; ';

/**
 * A worker whose disk fails after its fenced publish, in the calls `inject` makes fail:
 * `current` stays where it was while the disk fails. With `expect: "rebuilt"` the attempt is
 * recorded rebuilt (the build is published, its fence on disk) with `warning` in its log, and
 * repair moves `current` once the disk works; with `expect: "retried"` the attempt fails as
 * transient with `warning` as its reason, and the next one (the disk working again) publishes,
 * with its fence on disk.
 */
async function publishedWhileDiskFails(
  t: TestContext,
  name: string,
  inject: (pid: number, outputDir: string) => Promise<() => void>,
  expect: "rebuilt" | "retried",
  warning: RegExp,
  /** Attempt 1's run listed beside the output before its step ends (the calls `inject` fails would list it). */
  listedBefore = false,
) {
  const bed = await createTestBed({
    [name]: {
      output: `out/${name}`,
      retries: { attempts: 3, backoff: "2s" },
      steps: [
        {
          name: "write",
          run: ["sh", "-c", `${listedBefore ? GATED : ""}echo built > out.txt`],
        },
      ],
    },
  });
  t.after(() => bed.close());
  const worker = await bed.startWorker();
  t.after(() => worker.stop());
  const outputDir = path.join(bed.dir, `out/${name}`);
  fs.mkdirSync(path.join(outputDir, "builds"), { recursive: true });
  const stopTracer = await inject(worker.pid, outputDir);
  const jobId = await bed.trigger(name, { version: "v1" });
  if (listedBefore) {
    // Once its step runs (its look for an earlier publish of its job is behind it: steps start
    // after it), for each
    // fence its grant may be (a fresh Redis and disk: the first few).
    await until("attempt 1's step running", async () => fs.existsSync(path.join(outputDir, ".step-started")), 60_000);
    const runId = runIdOf(jobId, 1);
    for (let fence = 1; fence <= 5; fence++)
      fs.symlinkSync("v1 -", path.join(outputDir, `.published-run@${fence}@${runId}`));
    fs.writeFileSync(path.join(outputDir, ".gate"), "");
  }
  const first = await bed.waitForRun((r) => r.jobId === jobId && r.status !== "running", 60_000, "the attempt ends");
  // Repair waits REPAIR_AFTER_MS (10 s) after a publish before it touches `current`; the next
  // attempt waits for its 2 s backoff.
  assert.equal(await readCurrent(outputDir), null, "current stays while the disk fails");
  if (expect === "rebuilt") {
    // Repair keeps failing while the disk does: the health report names the output (black-box
    // helper-116: it said "No problems" while current lagged behind the published build).
    const lagging = await until("the health report naming the lagging current", async () => {
      const problems = await currentLagProblems(bed.claims, bed.keys, await serverNow(bed.claims));
      return problems.find((p) => p.startsWith(`${outputDir}/current`)) ?? null;
    });
    assert.match(lagging, new RegExp(`still serves an older build than the published ${first.buildHash}`));
  }
  stopTracer();
  if (expect === "rebuilt") {
    assert.equal(first.status, "rebuilt", `recorded ${first.status}: ${first.reason ?? ""}`);
    // The record says the output did not serve its build when it ended, not only the log
    // (black-box helper-124: a plain "rebuilt" with no reason).
    assert.match(
      first.reason ?? "",
      /published, but \S+\/current could not be moved to its build when it ended \(.*EIO.*\): the output served the build before until repair/,
    );
    const logs = await bed.main.lrange(bed.keys.runLog(first.id), 0, -1);
    assert.ok(
      logs.some((line) => warning.test(line)),
      `the run log warns: ${logs.join(" | ")}`,
    );
  } else {
    assert.equal(first.status, "failed", `recorded ${first.status}: ${first.reason ?? ""}`);
    assert.match(first.reason ?? "", warning);
    assert.equal(first.attempt, 1);
    // It did publish in Redis: its record names the build (repair may make it current later).
    assert.match(first.buildHash ?? "", BUILD_HASH, "the failed record names the build it published in Redis");
  }
  const published =
    expect === "rebuilt"
      ? first
      : await bed.waitForRun((r) => r.jobId === jobId && r.status === "rebuilt", 60_000, "the next attempt publishes");
  const deadline = Date.now() + 60_000;
  while ((await readCurrent(outputDir)) !== published.buildHash && Date.now() < deadline)
    await new Promise((r) => setTimeout(r, 250));
  assert.equal(await readCurrent(outputDir), published.buildHash, "current follows the published build");
  await until("the health report no longer naming the output", async () => {
    const problems = await currentLagProblems(bed.claims, bed.keys, await serverNow(bed.claims));
    return !problems.some((p) => p.startsWith(`${outputDir}/current`));
  });
  const record = await readPublishedFence(outputDir);
  assert.ok(
    record && record.fence >= published.fence!,
    `the fence record ${JSON.stringify(record)} covers fence ${published.fence}`,
  );
  assert.equal(record.hash, published.buildHash);
}

test("a worker whose swap of current fails after its publish: the attempt is recorded rebuilt (the build is published), its reason and a warning say current did not follow; repair moves current", async (t) => {
  // Every symlink() of the worker fails: the run's listing (made by the test before the step ends,
  // so the worker finds it there) and the new `current` link, made after the fenced publish and
  // its durable record (strace's -P matches only rename's first path, so the rename itself cannot
  // be singled out).
  await publishedWhileDiskFails(
    t,
    "current-eio",
    (pid) => injectInto(t, pid, ["-e", "trace=symlink,symlinkat", "-e", "inject=symlink,symlinkat:error=EIO"]),
    "rebuilt",
    /WARNING: published build .*\/current could not be swapped or synced/,
    true,
  );
});

/**
 * The published fence on disk is what keeps `current` from moving back after the claims Redis
 * loses a publish (repair compares the pointer with it), and a publish whose fence is not on disk
 * lives in Redis only. So a publisher whose fence record fails leaves `current`, and its attempt
 * fails as transient: the next publishes again. Before this rule the worker swapped `current`
 * anyway and recorded the attempt rebuilt, with a warning (both tests below failed at "current
 * stays while the disk fails").
 */
const UNRECORDED = /^transient: published build .* but its fence could not be recorded on disk/;

test("a worker whose fsync of the fence record fails (a failing disk): current stays, the attempt fails as transient, the next one publishes", async (t) => {
  // Every fsync of the output directory fails while the tracer runs; the fence record's is the
  // first (builds/ exists, so the promote does not sync the output directory).
  await publishedWhileDiskFails(
    t,
    "fence-eio",
    (pid, outputDir) => failFsyncsOf(t, pid, [outputDir]),
    "retried",
    UNRECORDED,
  );
});

test("a worker that cannot write the fence record at all: current stays, the attempt fails as transient, the next one publishes", async (t) => {
  // Every link() of the worker fails (only the fence record links) while the tracer runs.
  await publishedWhileDiskFails(
    t,
    "fence-unwritten",
    (pid) => injectInto(t, pid, ["-e", "trace=link,linkat", "-e", "inject=link,linkat:error=EIO"]),
    "retried",
    UNRECORDED,
  );
});

test("an output on a filesystem without hard links (link answers EPERM): the fence record is written in place, and the publish goes through", async (t) => {
  const bed = await createTestBed({
    "no-links": { output: "out/no-links", steps: [{ name: "write", run: ["sh", "-c", "echo built > out.txt"] }] },
  });
  t.after(() => bed.close());
  const worker = await bed.startWorker();
  t.after(() => worker.stop());
  const outputDir = path.join(bed.dir, "out/no-links");
  const stopTracer = await injectInto(t, worker.pid, [
    "-e",
    "trace=link,linkat",
    "-e",
    "inject=link,linkat:error=EPERM",
  ]);
  const jobId = await bed.trigger("no-links", { version: "v1" });
  const run = await bed.waitForRun((r) => r.jobId === jobId && r.status !== "running", 60_000, "the attempt ends");
  stopTracer();
  assert.equal(run.status, "rebuilt", `recorded ${run.status}: ${run.reason ?? ""}`);
  assert.equal(await readCurrent(outputDir), run.buildHash);
  assert.deepEqual(await readPublishedFence(outputDir), { fence: run.fence, hash: run.buildHash });
  assert.deepEqual(
    fs
      .readdirSync(outputDir)
      .filter((name) => name.startsWith(".published-fence"))
      .sort(),
    [".published-fence", `.published-fence@${run.fence}`],
    "no temporary file is left (the first is for workers of the earlier version)",
  );
});

test("a fence record held back, then refused, while an operator force-releases the claim after the publish: the record names the publish beside the loss, and the request is kept", async (t) => {
  // Found by the soak (a holder paused right after its publish, its claim past its TTL, then a full
  // disk): the record said only "claim lost … deferred", though its build was published in the
  // claims Redis (and later made current by repair).
  const name = "fence-late";
  const bed = await createTestBed({
    [name]: {
      output: `out/${name}`,
      claim: { ttl: "3s", refreshEvery: "1s" },
      retries: { attempts: 3, backoff: "1s" },
      steps: [{ name: "write", run: ["sh", "-c", "echo built > out.txt"] }],
    },
  });
  t.after(() => bed.close());
  const worker = await bed.startWorker();
  t.after(() => worker.stop());
  const outputDir = path.join(bed.dir, `out/${name}`);
  fs.mkdirSync(path.join(outputDir, "builds"), { recursive: true });
  const claim = claimName(bed.definitions.rebuilds.get(name)!.claimPath);
  // Every link() of the worker (only the fence record links, after the fenced publish) waits 6 s,
  // then fails.
  const stopTracer = await injectInto(t, worker.pid, [
    "-e",
    "trace=link,linkat",
    "-e",
    "inject=link,linkat:error=EIO:delay_enter=6000000",
  ]);
  const jobId = await bed.trigger(name, { version: "v1" });
  const published = await until("the publish in the claims Redis", async () => {
    const pointer = await readPublished(bed.claims, bed.keys, claim);
    return pointer?.runId?.startsWith(jobId) ? pointer : null;
  });
  const held = await readClaim(bed.claims, bed.keys, claim);
  assert.ok(held, "the claim is still held while its fence record is written");
  const released = await forceReleaseClaim({ claims: bed.claims, audit: bed.main }, bed.keys, {
    name: claim,
    token: held.token,
    actor: "test-operator",
    reason: "looked stuck",
  });
  assert.equal(released.status, "released");
  const first = await bed.waitForRun((r) => r.jobId === jobId && r.status !== "running", 60_000, "the attempt ends");
  stopTracer();
  assert.equal(first.status, "deferred", `recorded ${first.status}: ${first.reason ?? ""}`);
  assert.match(first.reason ?? "", /force-released/);
  assert.match(
    first.reason ?? "",
    new RegExp(
      `published build ${published.value} \\(fence ${published.fence}\\) in the claims Redis, but its fence could not be recorded on disk`,
    ),
  );
  assert.equal(first.buildHash, published.value, "the record names the build it published in the claims Redis");
  // The request is kept: a later attempt of the job publishes.
  const rebuilt = await bed.waitForRun(
    (r) => r.jobId === jobId && r.status === "rebuilt",
    60_000,
    "a later attempt publishes",
  );
  assert.ok(rebuilt.attempt > first.attempt);
});

test("a worker whose repeat finds an older build it cannot sync (a lost write): moved aside, replaced, and shown as a problem until an operator removes it", async (t) => {
  const bed = await createTestBed({
    "lost-write": {
      output: "out/lost-write",
      steps: [{ name: "write", run: ["sh", "-c", 'echo "built $CLAIMWATCH_VERSION" > out.txt'] }],
    },
  });
  t.after(() => bed.close());
  const worker = await bed.startWorker();
  t.after(() => worker.stop());
  const outputDir = path.join(bed.dir, "out/lost-write");
  const rebuilt = async (version: string, force = false) => {
    const jobId = await bed.trigger("lost-write", { version, force });
    const run = await bed.waitForRun((r) => r.jobId === jobId && r.status !== "running", 60_000, `${version} ends`);
    assert.equal(run.status, "rebuilt", `${version}: recorded ${run.status}: ${run.reason ?? ""}`);
    return run;
  };
  const older = (await rebuilt("v1")).buildHash!;
  const newer = (await rebuilt("v2")).buildHash!;
  assert.notEqual(older, newer);
  assert.deepEqual(await changedBuildProblems(bed.main, bed.keys), []);

  // v1 again, forced: the same bytes, so the same builds/<older>, which current no longer points
  // at; its file's fsync fails (EIO) in every thread of the worker.
  const stopTracer = await failFsyncsOf(t, worker.pid, [path.join(outputDir, "builds", older, "out.txt")]);
  const again = await rebuilt("v1", true);
  stopTracer();
  assert.equal(again.buildHash, older);
  const aside = fs.readdirSync(path.join(outputDir, "builds")).filter((n) => n.startsWith(`.unsynced-${older}-`));
  assert.equal(aside.length, 1, "the unsynced build was moved aside");
  assert.equal(fs.readlinkSync(path.join(outputDir, "current")), path.join("builds", older));
  assert.equal(fs.readFileSync(path.join(outputDir, "current", "out.txt"), "utf8"), "built v1\n");

  // The operator sees it (health banner, Rebuilds page) until the moved-aside copy is removed.
  const problems = await changedBuildProblems(bed.main, bed.keys);
  assert.equal(problems.length, 1, problems.join(" | "));
  assert.match(problems[0]!, /disk lost a write under lost-write/);
  assert.ok(problems[0]!.includes(path.join(outputDir, "builds", aside[0]!)), problems[0]);
  const logs = await bed.main.lrange(bed.keys.runLog(again.id), 0, -1);
  assert.ok(
    logs.some((line) => line.includes("could not be read or synced")),
    logs.join(" | "),
  );
  await checkPublishedBuilds(bed.main, bed.keys, bed.definitions, "test");
  assert.equal((await changedBuildProblems(bed.main, bed.keys)).length, 1, "listed while the copy is there");
  fs.rmSync(path.join(outputDir, "builds", aside[0]!), { recursive: true, force: true });
  await checkPublishedBuilds(bed.main, bed.keys, bed.definitions, "test");
  assert.deepEqual(await changedBuildProblems(bed.main, bed.keys), [], "cleared once removed");
});

test("a build moved aside whose promote then failed (builds/ could not be synced) is still shown as a problem: the build check finds the unreported copy", async (t) => {
  const bed = await createTestBed({
    "aside-unreported": {
      output: "out/aside-unreported",
      steps: [{ name: "write", run: ["sh", "-c", 'echo "built $CLAIMWATCH_VERSION" > out.txt'] }],
    },
  });
  t.after(() => bed.close());
  const worker = await bed.startWorker();
  t.after(() => worker.stop());
  const outputDir = path.join(bed.dir, "out/aside-unreported");
  const ended = async (version: string, force = false) => {
    const jobId = await bed.trigger("aside-unreported", { version, force });
    return bed.waitForRun((r) => r.jobId === jobId && r.status !== "running", 60_000, `${version} ends`);
  };
  const older = (await ended("v1")).buildHash!;
  assert.equal((await ended("v2")).status, "rebuilt");

  // v1 again, forced: its older build's file cannot be synced (moved aside), and neither can
  // builds/ after the new copy moved in — the promote fails after the move, before any report.
  const buildsDir = path.join(outputDir, "builds");
  const stopTracer = await failFsyncsOf(t, worker.pid, [path.join(buildsDir, older, "out.txt"), buildsDir]);
  const failed = await ended("v1", true);
  stopTracer();
  assert.notEqual(failed.status, "rebuilt", `the promote failed: ${failed.status} ${failed.reason ?? ""}`);
  const aside = fs.readdirSync(buildsDir).filter((n) => n.startsWith(`.unsynced-${older}-`));
  assert.equal(aside.length, 1, "the unsynced build was moved aside");
  assert.deepEqual(await changedBuildProblems(bed.main, bed.keys), [], "nobody reported it (the promote threw)");

  const lines = await checkPublishedBuilds(bed.main, bed.keys, bed.definitions, "test");
  assert.ok(
    lines.some((line) => line.includes(aside[0]!)),
    lines.join(" | "),
  );
  const problems = await changedBuildProblems(bed.main, bed.keys);
  assert.equal(problems.length, 1, problems.join(" | "));
  assert.match(problems[0]!, /disk lost a write under aside-unreported/);
  assert.ok(problems[0]!.includes(path.join(buildsDir, aside[0]!)), problems[0]);
  // Listed while it is there, even when it cannot be looked at (a symlink loop stands for an
  // unreadable path: stat fails, not with ENOENT); cleared once it is gone.
  fs.rmSync(path.join(buildsDir, aside[0]!), { recursive: true, force: true });
  fs.symlinkSync(aside[0]!, path.join(buildsDir, aside[0]!));
  await checkPublishedBuilds(bed.main, bed.keys, bed.definitions, "test");
  assert.equal((await changedBuildProblems(bed.main, bed.keys)).length, 1, "a path that cannot be read stays listed");
  fs.rmSync(path.join(buildsDir, aside[0]!), { force: true });
  await checkPublishedBuilds(bed.main, bed.keys, bed.definitions, "test");
  assert.deepEqual(await changedBuildProblems(bed.main, bed.keys), [], "cleared once removed");
});

test("each changed build's problem says what to do: a moved-aside copy is deleted (verify no longer finds it), a build changed in place is verified and rebuilt", async (t) => {
  const server = await startTestRedis();
  const main = createRedis(`redis://127.0.0.1:${server.port}`, "worker");
  const keys = redisKeys(uniquePrefix("changed-text"));
  t.after(async () => {
    await closeRedis(main);
    await stopTestRedis(server);
  });
  const base = { rebuild: "tiles", tenant: null, expected: "a".repeat(32), foundAt: Date.now(), foundBy: "test" };
  const movedAside = `/srv/out/tiles/builds/.changed-${"a".repeat(32)}-1-ab`;
  const inPlace = `/srv/out/tiles/builds/${"b".repeat(32)}`;
  await recordChangedBuild(main, keys, { ...base, kind: "changed", path: movedAside, actual: "(moved aside)" });
  await recordChangedBuild(main, keys, { ...base, path: inPlace, actual: "c".repeat(32) });
  try {
    const problems = await changedBuildProblems(main, keys);
    const aside = problems.find((p) => p.includes(movedAside))!;
    assert.match(aside, /a rebuild moved it aside/);
    assert.ok(aside.includes(`chmod -R u+w ${movedAside} && rm -rf ${movedAside}`), aside);
    assert.doesNotMatch(aside, /verify/);
    const changed = problems.find((p) => p.includes(inPlace))!;
    assert.match(
      changed,
      /no longer matches its hash .*run npx claimwatch verify tiles, and rebuild its version with force/,
    );
  } finally {
    await main.hdel(keys.changedBuilds, movedAside, inPlace);
  }
});

test("a publish whose run cannot be listed beside the output (its listing refused: a full disk) is not recorded as done, so a job a Redis crash brings back finds no publish to skip by and nothing says it published (black-box helper-161)", () => {
  const outputDir = fs.mkdtempSync(path.join(root, "record-listed-"));
  const hash = "a".repeat(32);
  const recordTraced = (fence: number, runId: string, inject: string[]) =>
    spawnSync("strace", recordFenceHostArgv(inject, outputDir, fence, hash, runId), {
      encoding: "utf8",
      timeout: 120_000,
    });
  const listedOk = recordTraced(5, "run-first-a1", []);
  assert.match(listedOk.stdout, /^RECORDED recorded\nLISTED run-first-a1\n$/, listedOk.stderr);
  // Only the run's listing is a symlink (the fence's entry is linked, the legacy file renamed):
  // refused, both times it is tried.
  const refused = recordTraced(6, "run-second-a1", [
    "-e",
    "trace=symlink,symlinkat",
    "-e",
    "inject=symlink,symlinkat:error=ENOSPC",
  ]);
  assert.match(
    refused.stdout,
    /^FAILED run run-second-a1 could not be listed as the publisher of fence 6 in .*: .*ENOSPC.*\nLISTED run-first-a1\n$/,
    refused.stderr,
  );
  // Recorded again once the disk takes it (its fence's entry is there already): listed now (review
  // helper-164: the repeat answered "recorded" and left it unlisted).
  const again = recordTraced(6, "run-second-a1", []);
  assert.match(again.stdout, /^RECORDED recorded\nLISTED run-first-a1,run-second-a1\n$/, again.stderr);
  // A paused publisher whose fence a newer one passed: its publish is listed too.
  const late = recordTraced(5, "run-late-a1", []);
  // (In the order of their fences.)
  assert.match(late.stdout, /^RECORDED newer\nLISTED run-first-a1,run-late-a1,run-second-a1\n$/, late.stderr);
  // In the legacy file's list too, which is all a worker of the previous version reads (review
  // helper-169: only a publisher's own first write put its run there).
  const { jobs } = JSON.parse(fs.readFileSync(path.join(outputDir, ".published-fence"), "utf8")) as { jobs: string[] };
  assert.deepEqual(
    jobs.map((line) => line.split(" ")[0]),
    ["run-first-a1", "run-second-a1", "run-late-a1"],
  );
});

test("two writers listing runs beside one output at once both stay listed: a writer held up inside its write does not undo the other's listing (review helper-165: the single list file was read, changed and renamed over)", async () => {
  const outputDir = fs.mkdtempSync(path.join(root, "record-two-writers-"));
  const hash = "a".repeat(32);
  // Both writers loaded first (a node under strace takes seconds to start on a loaded machine):
  // each records once told to go.
  const host = (fence: number, runId: string, inject: string[]) => {
    const child = spawn("strace", recordFenceHostArgv(inject, outputDir, fence, hash, runId), {
      stdio: ["pipe", "pipe", "inherit"],
      env: { ...process.env, RECORD_AFTER_GO: "1" },
    });
    let out = "";
    child.stdout.on("data", (chunk: Buffer) => (out += chunk.toString()));
    // A hang fails the test without leaving the child behind.
    const timer = setTimeout(() => child.kill("SIGKILL"), 120_000);
    const exited = new Promise<string>((resolve, reject) => {
      child.once("error", reject);
      child.once("exit", () => {
        clearTimeout(timer);
        resolve(out.replace(/^READY\n/, ""));
      });
    });
    return {
      ready: () => until(`${runId} loaded`, async () => out.startsWith("READY\n"), 60_000),
      go: () => child.stdin.end("go\n"),
      exited,
    };
  };
  // The first writer is held up 6 s in every rename (the legacy file's: after it read that file
  // and wrote its new one, seen as its temporary file) while the second records a higher fence
  // and lists its run.
  const slow = host(5, "run-slow-a1", [
    "-e",
    "trace=rename,renameat,renameat2",
    "-e",
    "inject=rename,renameat,renameat2:delay_enter=6000000",
  ]);
  const fast = host(6, "run-fast-a1", []);
  await Promise.all([slow.ready(), fast.ready()]);
  slow.go();
  await until(
    "the first writer inside its held-up rename",
    async () => fs.readdirSync(outputDir).some((name) => name.startsWith(".published-fence-writing.")),
    60_000,
  );
  fast.go();
  assert.match(await fast.exited, /^RECORDED recorded\nLISTED (run-slow-a1,)?run-fast-a1\n$/);
  // It met the second's fence once its rename went on: the two writes did overlap.
  assert.match(await slow.exited, /^RECORDED newer\n/);
  assert.deepEqual(
    (await readPublishedJobs(outputDir)).map((run) => run.runId).sort(),
    ["run-fast-a1", "run-slow-a1"],
    "both runs listed",
  );
  assert.equal((await readPublishedFence(outputDir))?.fence, 6);
  // The legacy file a worker of the previous version reads (its fence and its list) keeps both
  // too: this version's writers of it take turns (review helper-171: the later rename won).
  const legacy = JSON.parse(fs.readFileSync(path.join(outputDir, ".published-fence"), "utf8")) as {
    fence: number;
    jobs: string[];
  };
  assert.equal(legacy.fence, 6, JSON.stringify(legacy));
  assert.deepEqual(legacy.jobs.map((line) => line.split(" ")[0]).sort(), ["run-fast-a1", "run-slow-a1"]);
});

test("an attempt whose fence the disk recorded but whose run it could not list fails as transient; the next attempt lists that run and builds nothing (review helper-166: it built and published its version again)", async (t) => {
  const bed = await createTestBed({
    listed: {
      output: "out/listed",
      retries: { attempts: 3, backoff: "3s" },
      steps: [{ name: "write", run: ["sh", "-c", "echo built > out.txt"] }],
    },
  });
  t.after(() => bed.close());
  const outputDir = path.join(bed.dir, "out/listed");
  fs.mkdirSync(path.join(outputDir, "builds"), { recursive: true });
  // Attempt 1's listing cannot be made (a directory in the way of each name it could take: the
  // fence is not known before the grant); the fence's own entry can.
  const jobId = await bed.trigger("listed", { version: "v1" });
  const inTheWay = Array.from({ length: 40 }, (_, i) =>
    path.join(outputDir, `.published-run@${i + 1}@${runIdOf(jobId, 1)}`),
  );
  for (const dir of inTheWay) fs.mkdirSync(dir);
  const freeThem = () => inTheWay.forEach((dir) => fs.rmSync(dir, { recursive: true, force: true }));
  t.after(freeThem);
  const worker = await bed.startWorker();
  t.after(() => worker.stop());
  const first = await bed.waitForRun((r) => r.jobId === jobId && r.status !== "running", 60_000, "attempt 1 ends");
  freeThem(); // the disk takes it again, within the backoff
  assert.equal(first.status, "failed", `${first.status}: ${first.reason}`);
  assert.match(first.reason ?? "", /recorded its fence beside the output, but run .* could not be listed/);
  const second = await bed.waitForRun(
    (r) => r.jobId === jobId && r.attempt === 2 && r.status !== "running",
    60_000,
    "attempt 2 ends",
  );
  assert.equal(second.status, "skipped", `${second.status}: ${second.reason}`);
  assert.match(second.reason ?? "", new RegExp(`run ${first.id} of this job published its build here before`));
  assert.ok(
    (await readPublishedJobs(outputDir)).some((run) => run.runId === first.id),
    "attempt 1's run listed",
  );
  assert.equal((await bed.allRuns()).filter((r) => r.jobId === jobId && r.status === "rebuilt").length, 0);
});
