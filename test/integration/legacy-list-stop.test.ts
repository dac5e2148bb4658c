/**
 * The legacy publish list (`<output>/.published-fence`'s `jobs`, read by workers of the previous
 * version) is written by this version's writers one at a time (flock on `.published-list.lock`);
 * a write whose lock is held goes to the background (lib/rebuilds/published-fence.ts). A worker
 * stopped meanwhile gives it a moment (`settleLegacyWrites`) and says what it could not list: it
 * dropped it silently before. Real worker, real `flock` holder.
 */
import assert from "node:assert/strict";
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { after, test } from "node:test";
import { createTestBed, slowStep, type TestBed } from "../support/stack";
import { until } from "../support/until";

let bed: TestBed;
const holders: ChildProcess[] = [];
after(async () => {
  for (const holder of holders) letGo(holder);
  await bed?.close();
});

const LOCK = ".published-list.lock";

/** `flock` holding the legacy list's lock (a writer held up inside its write), once it holds it. */
async function holdLock(outputDir: string): Promise<ChildProcess> {
  fs.mkdirSync(outputDir, { recursive: true });
  // Its own process group: the lock goes with `sleep` too (it inherits the locked file).
  const holder = spawn("flock", [path.join(outputDir, LOCK), "sleep", "600"], { stdio: "ignore", detached: true });
  holders.push(holder);
  await until("the lock held", async () => spawnSync("flock", ["-n", path.join(outputDir, LOCK), "true"]).status === 1);
  return holder;
}

/** Kills a holder's process group (flock and its `sleep`). */
function letGo(holder: ChildProcess): void {
  try {
    process.kill(-holder.pid!, "SIGKILL");
  } catch {
    // gone already
  }
}

function legacyJobs(outputDir: string): string[] {
  const raw = fs.readFileSync(path.join(outputDir, ".published-fence"), "utf8");
  return (JSON.parse(raw) as { jobs?: string[] }).jobs ?? [];
}

test("a worker stopped while its legacy list write waits for the lock: written if the lock is let go within the stop, else said in the log", async () => {
  bed = await createTestBed({ c: { output: "out/c", steps: [slowStep(0)] } });
  const outputDir = path.join(bed.dir, "out", "c");

  // 1. The lock stays held through the stop: the worker says what it could not list.
  const held = await holdLock(outputDir);
  let worker = await bed.startWorker();
  const first = await bed.trigger("c", { version: "v1" });
  const firstRun = await bed.waitForRun((r) => r.jobId === first && r.status === "rebuilt", 60_000);
  assert.equal(await worker.stop("SIGTERM"), 0, worker.output());
  assert.match(
    worker.output(),
    /shutdown: the legacy file \.published-fence of 1 output\(s\) not updated \(its lock was held, or the write did not end in time\): 1 publish\(es\) not listed there/,
    worker.output(),
  );
  // Its own listing (the symlink) was made regardless.
  assert.ok(
    fs.readdirSync(outputDir).some((name) => name.startsWith(".published-run@") && name.endsWith(`@${firstRun.id}`)),
    fs.readdirSync(outputDir).join(" "),
  );
  letGo(held);
  await until(
    "the lock let go",
    async () => spawnSync("flock", ["-n", path.join(outputDir, LOCK), "true"]).status === 0,
  );

  // 2. Let go as the worker stops: the background write goes through before it exits.
  const heldAgain = await holdLock(outputDir);
  worker = await bed.startWorker();
  const second = await bed.trigger("c", { version: "v2" });
  const secondRun = await bed.waitForRun((r) => r.jobId === second && r.status === "rebuilt", 60_000);
  const stopped = worker.stop("SIGTERM");
  await worker.waitFor(/SIGTERM: stopping/, 10_000).catch(() => "");
  letGo(heldAgain);
  assert.equal(await stopped, 0, worker.output());
  assert.doesNotMatch(worker.output(), /\.published-fence of \d+ output/, worker.output());
  assert.ok(
    legacyJobs(outputDir).some((line) => line.startsWith(`${secondRun.id} v2 `)),
    JSON.stringify(legacyJobs(outputDir)),
  );
});
