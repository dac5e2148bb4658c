/**
 * Contained steps through the real worker: a published build is the bytes its hash names even
 * when the step left writers behind; a daemon holding stdout does not hang the run; a SIGKILLed
 * worker's steps die at once; a deploy (SIGTERM) kills a SIGTERM-deaf step before the next attempt
 * starts; `claimwatch verify` and the worker's check find a changed build. Real processes, /proc and
 * bytes — not logs.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { after, before, test } from "node:test";
import { claimName } from "../../lib/claims";
import { checkPublishedBuilds, listChangedBuilds } from "../../lib/rebuilds/build-integrity";
import { writeCancelRequest } from "../../lib/rebuilds/cancel-request";
import { hashDirectory, readCurrent } from "../../lib/rebuilds/output";
import { killMarkedProcesses, newMarker, pidsWithMarker, waitUntilNoMarker } from "../support/markers";
import { createTestBed, type TestBed } from "../support/stack";
import { until } from "../support/until";
import { detectContainment } from "../../lib/rebuilds/steps/containment";
import { stepCgroupParentName } from "../../lib/rebuilds/steps/step-cgroup";

/** Where workers' step cgroups go on this host (the same cgroup as this test's). */
const STEP_CGROUP_HOME = detectContainment("cgroup").stepCgroups!.home;

const escapeMarker = newMarker();
const daemonMarker = newMarker();
const endlessMarker = newMarker();
const deafMarker = newMarker();

/** Writers that outlive the step's program unless contained: into the work dir (which becomes the build) and the output. */
const ESCAPEES = [
  'echo main > "$CLAIMWATCH_WORK/main.txt"',
  '(sleep 2; echo late > "$CLAIMWATCH_WORK/late.txt"; echo late > "$0/late-output.txt") &',
  "(setsid sh -c 'sleep 2; echo daemon > \"$CLAIMWATCH_WORK/daemon.txt\"; sleep 600' &) &",
  "(trap '' TERM; sleep 600) &",
  "echo done",
].join("\n");

let bed: TestBed;
before(async () => {
  bed = await createTestBed({
    escapees: {
      output: "out/escapees",
      claim: { ttl: "3s", refreshEvery: "1s" },
      timeLimit: "1m",
      steps: [
        { name: "make", run: ["sh", "-c", ESCAPEES, "{output}"], env: { [escapeMarker.name]: escapeMarker.value } },
      ],
    },
    daemon: {
      output: "out/daemon",
      claim: { ttl: "3s", refreshEvery: "1s" },
      timeLimit: "10s",
      retries: { attempts: 1, backoff: "1s", maxBackoff: "1s" },
      steps: [
        {
          name: "start",
          run: ["sh", "-c", "setsid sleep 600 & echo started"],
          env: { [daemonMarker.name]: daemonMarker.value },
          killGrace: "5s",
        },
      ],
    },
    endless: {
      output: "out/endless",
      claim: { ttl: "3s", refreshEvery: "1s" },
      timeLimit: "5m",
      retries: { attempts: 1, backoff: "1s", maxBackoff: "1s" },
      steps: [
        {
          name: "loop",
          run: ["sh", "-c", `${ESCAPEES}\ntrap '' TERM\nwhile :; do sleep 0.2; done`, "{output}"],
          env: { [endlessMarker.name]: endlessMarker.value },
          killGrace: "30s",
        },
      ],
    },
    intruder: {
      output: "out/intruder",
      claim: { ttl: "3s", refreshEvery: "1s" },
      retries: { attempts: 1, backoff: "1s", maxBackoff: "1s" },
      // Builds its work dir, then (once a build is published) appends to it through `current`.
      steps: [
        {
          name: "write",
          run: [
            "sh",
            "-c",
            'echo built > "$CLAIMWATCH_WORK/v.txt"\n[ ! -e "$0/current" ] || echo tampered >> "$0/current/v.txt"',
            "{output}",
          ],
        },
      ],
    },
    deaf: {
      output: "out/deaf",
      claim: { ttl: "5s", refreshEvery: "1s" },
      timeLimit: "5m",
      // Ignores SIGTERM; appends "<run> <ns since epoch>" every 50 ms to a file both attempts share.
      steps: [
        {
          name: "write",
          run: [
            "sh",
            "-c",
            `trap '' TERM\nwhile :; do echo "$CLAIMWATCH_RUN_ID $(date +%s%N)" >> "$0/../writes.log"; sleep 0.05; done`,
            "{output}",
          ],
          env: { [deafMarker.name]: deafMarker.value },
          killGrace: "20s",
        },
      ],
    },
  });
});
after(async () => {
  killMarkedProcesses();
  await bed.close();
});

test("a step's leftover writers never touch the published build; nothing of the run outlives it", async () => {
  const worker = await bed.startWorker();
  try {
    const jobId = await bed.trigger("escapees");
    const run = await bed.waitForRun((r) => r.jobId === jobId && r.status === "rebuilt", 30_000);
    const { alive } = await waitUntilNoMarker(escapeMarker, 5_000 + 1_000); // killGrace (default 5 s) + 1 s
    assert.deepEqual(alive, [], "processes of the finished run are alive");
    await new Promise((r) => setTimeout(r, 10_000));
    const output = bed.definitions.rebuilds.get("escapees")!.outputPath;
    const current = await readCurrent(output);
    assert.equal(current, run.buildHash);
    assert.equal(await hashDirectory(path.join(output, "current")), current, "the published build changed");
    assert.deepEqual(fs.readdirSync(path.join(output, "current")), ["main.txt"]);
    assert.equal(fs.existsSync(path.join(output, "late-output.txt")), false, "a leftover wrote into the output");
    // Read-only: no write bit on the build or its files.
    assert.equal(fs.statSync(path.join(output, "current", "main.txt")).mode & 0o222, 0);
    assert.equal(fs.statSync(path.join(output, "builds", current!)).mode & 0o222, 0);
  } finally {
    await worker.stop();
  }
});

test("a step running as root cannot write into its output's published build (a read-only mount of builds/)", async () => {
  const output = bed.definitions.rebuilds.get("intruder")!.outputPath;
  const worker = await bed.startWorker();
  try {
    const first = await bed.trigger("intruder");
    const published = await bed.waitForRun((r) => r.jobId === first && r.status === "rebuilt", 30_000);
    const again = await bed.trigger("intruder", { force: true });
    const refused = await bed.waitForRun((r) => r.jobId === again && ["rebuilt", "failed"].includes(r.status), 30_000);
    assert.equal(refused.status, "failed", "the step's write into the published build succeeded");
    assert.match(String(refused.reason), /step write exited/);
    assert.equal(await readCurrent(output), published.buildHash);
    // CI runs as root: the worker says what it enforces.
    if (process.getuid?.() === 0) assert.match(worker.output(), /published builds read-only to steps/);
  } finally {
    await worker.stop();
  }
  const current = (await readCurrent(output))!;
  assert.equal(fs.readFileSync(path.join(output, "current", "v.txt"), "utf8"), "built\n");
  assert.equal(await hashDirectory(path.join(output, "builds", current)), current, "the published build changed");
});

test("verify and the worker's check find a byte changed in a published build", async () => {
  const output = bed.definitions.rebuilds.get("escapees")!.outputPath;
  const verify = () =>
    spawnSync(process.execPath, ["bin/claimwatch.mjs", "verify", "escapees"], {
      env: bed.env,
      encoding: "utf8",
    });
  const clean = verify();
  assert.equal(clean.status, 0, clean.stderr + clean.stdout);
  const current = (await readCurrent(output))!;
  const file = path.join(output, "builds", current, "main.txt");
  fs.writeFileSync(file, "mAin\n"); // as root: the read-only bits do not stop it
  const dirty = verify();
  assert.equal(dirty.status, 1, dirty.stdout);
  assert.ok(dirty.stdout.includes(path.join(output, "builds", current)), dirty.stdout);
  const unknown = spawnSync(process.execPath, ["bin/claimwatch.mjs", "verify", "nope"], {
    env: bed.env,
    encoding: "utf8",
  });
  assert.equal(unknown.status, 2);
  assert.match(unknown.stderr, /no rebuild named 'nope'; rebuilds: .*escapees/);

  const lines = await checkPublishedBuilds(bed.main, bed.keys, bed.definitions, "test-worker");
  assert.ok(
    lines.some((l) => l.includes("PUBLISHED BUILD CHANGED")),
    lines.join("\n"),
  );
  const changed = await listChangedBuilds(bed.main, bed.keys);
  assert.deepEqual(
    changed.map((b) => [b.rebuild, b.path]),
    [["escapees", path.join(output, "builds", current)]],
  );
  // Rebuilt with the same inputs: the changed build is moved aside and replaced; the next check clears it.
  const worker = await bed.startWorker();
  try {
    const jobId = await bed.trigger("escapees", { force: true });
    await bed.waitForRun((r) => r.jobId === jobId && r.status === "rebuilt", 30_000);
  } finally {
    await worker.stop();
  }
  assert.equal(await hashDirectory(path.join(output, "builds", current)), current);
  assert.ok(fs.readdirSync(path.join(output, "builds")).some((n) => n.startsWith(`.changed-${current}-`)));
  await bed.main.del(bed.keys.buildCheckLease("escapees", undefined)); // the check period passed
  await checkPublishedBuilds(bed.main, bed.keys, bed.definitions, "test-worker");
  assert.deepEqual(
    (await listChangedBuilds(bed.main, bed.keys)).map((b) => path.basename(b.path).startsWith(`.changed-${current}-`)),
    [true],
    "the whole build is cleared; the moved-aside one stays listed for the operator",
  );
});

for (const mode of ["cgroup", "pid-namespace"] as const) {
  test(`${mode}: a daemon holding stdout does not hang the run: it ends, and its claim is released`, async () => {
    const worker = await bed.startWorker({ CLAIMWATCH_STEP_CONTAINMENT: mode });
    try {
      const jobId = await bed.trigger("daemon", { force: true }); // the same inputs once per mode
      const run = await bed.waitForRun((r) => r.jobId === jobId && r.status !== "running", 10_000 + 5_000 + 10_000);
      assert.equal(run.status, "rebuilt", run.reason ?? "");
      const name = claimName(bed.definitions.rebuilds.get("daemon")!.claimPath, undefined);
      // Released right after the final record (its own round trip): a loaded machine shows the gap.
      await until("the claim's release", async () => (await bed.claims.exists(bed.keys.claim(name))) === 0, 10_000);
      assert.deepEqual(pidsWithMarker(daemonMarker), []);
    } finally {
      await worker.stop();
    }
  });

  test(`${mode}: SIGKILL of the worker: its step and everything the step started die at once, not after killGrace`, async (t) => {
    const worker = await bed.startWorker({ CLAIMWATCH_STEP_CONTAINMENT: mode });
    // Each mode's test leaves nothing for the next test (seen in CI): its worker stopped even when
    // it fails; its job cancelled (redelivered, it would loop for its 5 min time limit in a later
    // test's worker); and the dead worker's claim gone (it expires in 3 s: a job of the same
    // version meanwhile is a claim-held skip, never "running").
    const jobId = await bed.trigger("endless", { force: true });
    const claim = bed.keys.claim(claimName(bed.definitions.rebuilds.get("endless")!.claimPath, undefined));
    t.after(async () => {
      await worker.stop("SIGKILL");
      await writeCancelRequest(bed.main, bed.keys, jobId, {
        actor: "test",
        reason: "its worker was killed",
        at: Date.now(),
      });
      for (let i = 0; i < 300 && (await bed.claims.exists(claim)) === 1; i++)
        await new Promise((r) => setTimeout(r, 50));
    });
    await bed.waitForRun((r) => r.jobId === jobId && r.status === "running", 15_000);
    for (let i = 0; i < 100 && pidsWithMarker(endlessMarker).length < 4; i++)
      await new Promise((r) => setTimeout(r, 50));
    assert.ok(pidsWithMarker(endlessMarker).length >= 4, "the step and its escapees started");
    assert.equal(await worker.stop("SIGKILL"), null);
    // killGrace is 30 s: only a parent-death kill ends them within a few seconds.
    const { alive, ms } = await waitUntilNoMarker(endlessMarker, 5_000);
    assert.deepEqual(alive, [], "processes of the killed worker's step are alive");
    process.stdout.write(`# ${mode}: step processes gone ${ms} ms after the worker's SIGKILL\n`);
    if (mode === "cgroup") {
      // The warden removed the dead worker's step cgroups and their parent.
      const parents = () =>
        fs.readdirSync(STEP_CGROUP_HOME).filter((name) => name === stepCgroupParentName(worker.pid));
      for (let i = 0; i < 50 && parents().length > 0; i++) await new Promise((r) => setTimeout(r, 100));
      assert.deepEqual(parents(), [], "the killed worker's step cgroups were left behind");
    }
  });
}

test("a deploy (SIGTERM) kills a SIGTERM-deaf step before the next attempt's first write", async () => {
  const writes = path.join(path.dirname(bed.definitions.rebuilds.get("deaf")!.outputPath), "writes.log");
  const first = await bed.startWorker();
  const jobId = await bed.trigger("deaf");
  const run1 = await bed.waitForRun((r) => r.jobId === jobId && r.status === "running", 15_000);
  while (!fs.existsSync(writes)) await new Promise((r) => setTimeout(r, 50));
  const second = await bed.startWorker();
  try {
    const exit = first.stop("SIGTERM");
    const run2 = await bed.waitForRun((r) => r.jobId === jobId && r.id !== run1.id && r.status === "running", 60_000);
    assert.equal(await exit, 0, first.output());
    let lines: string[] = [];
    for (let i = 0; i < 100 && !lines.some((l) => l.startsWith(`${run2.id} `)); i++) {
      await new Promise((r) => setTimeout(r, 100));
      lines = fs.readFileSync(writes, "utf8").trim().split("\n");
    }
    const at = (id: string) => lines.filter((l) => l.startsWith(`${id} `)).map((l) => BigInt(l.split(" ")[1]!));
    const oldWrites = at(run1.id);
    const newWrites = at(run2.id);
    assert.ok(oldWrites.length > 0 && newWrites.length > 0, lines.slice(-5).join("\n"));
    const lastOld = oldWrites.reduce((a, b) => (a > b ? a : b));
    const firstNew = newWrites.reduce((a, b) => (a < b ? a : b));
    assert.ok(
      lastOld < firstNew,
      `the old step wrote at ${lastOld}, after the next attempt's first write at ${firstNew}`,
    );
    // The old attempt's step was given its full grace (it ignores SIGTERM), then killed, and the
    // job handed back cleanly — not left to the stalled-job check after a fixed shutdown wait.
    const old = (await bed.runsOfJob(jobId)).find((r) => r.id === run1.id);
    assert.equal(old?.status, "aborted");
    assert.match(old?.reason ?? "", /worker shutdown: job handed back/);
  } finally {
    await second.stop("SIGKILL");
  }
});
