/**
 * The upkeep after a heartbeat (the sweep of dead workers' runs, the repair of `current`,
 * trimming and pruning) runs one at a time. One held up by a hung disk stops every later one, so
 * the worker says so in its log and in its heartbeat (the Workers page, the health report) while
 * the beats go on, and says when it ended.
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import { after, before, test } from "node:test";
import { createTestBed, slowStep, type TestBed } from "../support/stack";
import { injectInto } from "../support/strace";
import { until } from "../support/until";
import { liveWorkerProblems } from "../../lib/health/operations";
import { listLiveWorkers } from "../../lib/workers/heartbeat";

let bed: TestBed;
before(async () => {
  bed = await createTestBed({ tiles: { output: "out/tiles", steps: [slowStep(0)] } });
});
after(() => bed.close());

/** The threshold these tests set (CLAIMWATCH_UPKEEP_SLOW_MS; 30 s by default): long past one beat's upkeep here. */
const UPKEEP_SLOW = { CLAIMWATCH_UPKEEP_SLOW_MS: "4000" };

test("an upkeep held up by a hung disk is said in the log after CLAIMWATCH_UPKEEP_SLOW_MS, the beats go on, and its end is said too", async (t) => {
  const outputDir = bed.definitions.rebuilds.get("tiles")!.outputPath;
  fs.mkdirSync(outputDir, { recursive: true });
  const worker = await bed.startWorker(UPKEEP_SLOW);
  const id = /\[worker ([^\]]+)\] ready: /.exec(worker.output())![1]!;
  try {
    // The repair opens the output directory on every upkeep: each open of it now takes 45 s.
    const release = await injectInto(t, worker.pid, [
      "-e",
      "trace=openat",
      "-e",
      "inject=openat:delay_enter=45000000",
      "-P",
      outputDir,
    ]);
    await worker.waitFor(/upkeep after the heartbeat still running after \d+ s \(a hung disk/, 60_000);
    const saidAfter = Number(/still running after (\d+) s/.exec(worker.output())![1]);
    assert.ok(saidAfter >= 4, `said after ${saidAfter} s, not before the threshold`);
    assert.equal(await bed.main.exists(bed.keys.workerHeartbeat(id)), 1, "the beats go on meanwhile");
    // ... and carry it, for the Workers page and the health report.
    await until("a beat says the upkeep is held up", async () =>
      (await liveWorkerProblems(bed.main, bed.keys)).some((p) => p.startsWith(`Worker ${id}: its upkeep`)),
    );
    const held = (await listLiveWorkers(bed.main, bed.keys)).find((w) => w.id === id);
    assert.ok((held?.upkeepRunningMs ?? 0) >= 4_000, JSON.stringify(held));
    release();
    await worker.waitFor(/upkeep after the heartbeat ended after \d+ s/, 60_000);
    await until("the next beat says nothing of it", async () =>
      (await listLiveWorkers(bed.main, bed.keys)).some((w) => w.id === id && w.upkeepRunningMs === null),
    );
  } finally {
    assert.equal(await worker.stop(), 0, worker.output());
  }
});

test("a stop while the upkeep is stuck on a hung disk ends with SIGKILL, after the exit's cleanup (the step cgroups' parent removed)", async (t) => {
  const outputDir = bed.definitions.rebuilds.get("tiles")!.outputPath;
  fs.mkdirSync(outputDir, { recursive: true });
  const worker = await bed.startWorker(UPKEEP_SLOW);
  const parent = /step containment: cgroup: .*\((\/sys\/fs\/cgroup\/[^)]+)\)/.exec(worker.output())?.[1];
  if (parent) assert.ok(fs.existsSync(parent), `the worker made ${parent}`);
  else t.diagnostic("no cgroup containment here: only the exit is checked");
  // Every open of the output directory (the repair's) now takes 10 minutes: past any stop.
  const release = await injectInto(t, worker.pid, [
    "-e",
    "trace=openat",
    "-e",
    "inject=openat:delay_enter=600000000",
    "-P",
    outputDir,
  ]);
  try {
    await worker.waitFor(/upkeep after the heartbeat still running after \d+ s \(a hung disk/, 60_000);
    worker.child.kill("SIGTERM");
    await worker.waitFor(/shutdown: ending with SIGKILL \(the upkeep may be stuck/, 120_000);
  } finally {
    // The killed worker's thread held in the delayed call goes only once the tracer lets go.
    release();
  }
  // A hang limit, not a timing goal: the stop's own bounds add up to well under a minute.
  const exited = await Promise.race([
    new Promise<NodeJS.Signals | number | null>((resolve) =>
      worker.child.exitCode !== null || worker.child.signalCode !== null
        ? resolve(worker.child.signalCode ?? worker.child.exitCode)
        : worker.child.once("exit", (code, signal) => resolve(signal ?? code)),
    ),
    new Promise<"hung">((resolve) => setTimeout(() => resolve("hung"), 120_000)),
  ]);
  if (exited === "hung") await worker.stop("SIGKILL");
  assert.equal(exited, "SIGKILL", worker.output());
  if (parent) assert.equal(fs.existsSync(parent), false, `${parent} removed by the exit's cleanup`);
});
