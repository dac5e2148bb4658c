/**
 * `cgroup` containment's own guarantees (lib/rebuilds/steps/step-cgroup.ts), with real processes
 * and the real cgroup v2 hierarchy: the program is born in its step's cgroup and everything it
 * starts dies with it; the worker is inside a step's cgroup only during its spawn and never dies
 * with one — not even when it is stopped right there and its warden has to kill the step; the
 * cgroups of dead workers are removed. The cases every mode shares run in
 * step-containment.test.ts, step-warden.test.ts and worker-containment.test.ts under both modes.
 */
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { test } from "node:test";
import type { RunStep } from "../../lib/rebuilds/definitions";
import { detectContainment } from "../../lib/rebuilds/steps/containment";
import { runCommandStep } from "../../lib/rebuilds/steps/run-step";
import { processStartTime, stepCgroupParentName } from "../../lib/rebuilds/steps/step-cgroup";
import { newMarker, pidsWithMarker, waitUntilNoMarker } from "../support/markers";
import { isRunning, waitForLine } from "../support/processes";
import { stepTestBed } from "../support/step-bed";

const { dir, context } = stepTestBed("cw-cgroup-");
const containment = detectContainment("cgroup");
const place = containment.stepCgroups!;
const ownCgroup = (pid: number | "self") =>
  /^0::(.*)$/m.exec(fs.readFileSync(`/proc/${pid}/cgroup`, "utf8"))?.[1] ?? "?";
const home = ownCgroup("self");

function step(script: string, env: Record<string, string>): RunStep {
  return { name: "s", run: ["sh", "-c", script], env, transientExitCodes: [], killGrace: 3_000, limits: {} };
}

test("the program runs in a cgroup of its own, as itself (not under an init), and its setsid daemon and double fork die at its end", async () => {
  const marker = newMarker();
  const lines: string[] = [];
  const script = [
    "setsid sleep 600 &",
    "(setsid sh -c 'sleep 600' &) &",
    'echo "pid $$ ppid $PPID"',
    'grep "^0::" /proc/self/cgroup',
  ].join("\n");
  await runCommandStep(
    step(script, { [marker.name]: marker.value }),
    context({ log: (line) => lines.push(line) }),
    containment,
  );
  const cgroupLine = lines.find((l) => l.includes("0::"));
  assert.match(String(cgroupLine), new RegExp(`0::${path.join(home, stepCgroupParentName(process.pid))}/step-\\d+$`));
  const ppid = Number(/ppid (\d+)/.exec(lines.join("\n"))?.[1]);
  assert.equal(ppid, process.pid, "the program is the worker's own child: no shim");
  assert.deepEqual((await waitUntilNoMarker(marker, 1_000)).alive, []);
  assert.deepEqual(
    fs.readdirSync(place.parent).filter((name) => name.startsWith("step-")),
    [],
    "the step's cgroup was removed",
  );
});

test("the worker is home after every spawn and outlives its steps' cgroup.kill (8 steps at once, each leaving daemons)", async () => {
  const marker = newMarker();
  const steps = Array.from({ length: 8 }, (_, i) =>
    runCommandStep(
      step(`setsid sleep 600 & sleep 0.${i}; exit ${i % 2}`, { [marker.name]: marker.value }),
      context(),
      containment,
    ).then(
      () => ownCgroup("self"),
      () => ownCgroup("self"),
    ),
  );
  assert.equal(ownCgroup("self"), home, "right after the spawns");
  assert.deepEqual(await Promise.all(steps), Array(8).fill(home));
  assert.deepEqual((await waitUntilNoMarker(marker, 1_000)).alive, []);
});

test("spawn errors and statuses: not found, not executable, a missing cwd, 128 + signal", async () => {
  const run = (s: Partial<RunStep>) =>
    runCommandStep({ ...step("", {}), ...s }, context(), containment).then(
      () => null,
      (error: Error) => error,
    );
  assert.match(
    String((await run({ run: ["/no/such/program"] }))?.message),
    /program not found or not executable: \/no\/such\/program/,
  );
  assert.match(String((await run({ run: ["no-such-program-on-path"] }))?.message), /program not found/);
  assert.match(String((await run({ run: [dir] }))?.message), /program not found or not executable/);
  assert.match(
    String((await run({ run: ["true"], cwd: "/no/such/dir" }))?.message),
    /working directory \/no\/such\/dir does not exist/,
  );
  const terminated = await run({ run: ["sh", "-c", "kill -TERM $$"], transientExitCodes: [143] });
  assert.equal(terminated?.name, "TransientStepError", "a signal counts as 128 + its number, as a shell reports it");
  assert.match(String((await run({ run: ["sh", "-c", "kill -KILL $$"] }))?.message), /was killed by SIGKILL/);
  assert.deepEqual(
    fs.readdirSync(place.parent).filter((name) => name.startsWith("step-")),
    [],
  );
});

test("steps with memory/pids limits run in the next strongest mode, and their limit holds", async (t) => {
  if (!containment.limits.pids) return t.skip("no pids controller on this host");
  assert.equal(containment.forLimitedSteps?.mode, "pid-namespace");
  const marker = newMarker();
  const error = await runCommandStep(
    { ...step("for i in $(seq 40); do sleep 5 & done; wait", { [marker.name]: marker.value }), limits: { pids: 8 } },
    context(),
    containment,
  ).then(
    () => null,
    (e: Error) => e,
  );
  assert.match(String(error?.message), /hit its limit of 8 processes/);
  assert.deepEqual(pidsWithMarker(marker), []);
});

test("a worker stopped inside a step's cgroup mid-spawn past its warden's limit: the warden moves it out before cgroup.kill; the child it forks on resuming lands in worker-held and dies", async () => {
  const marker = newMarker();
  const host = spawn(process.execPath, ["--import", "tsx", "test/support/cgroup-stall-host.ts"], {
    env: { ...process.env, [marker.name]: marker.value },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const line = await waitForLine(host, /^\{/, 60_000);
  const result = JSON.parse(line) as Record<string, unknown>;
  assert.equal(result.home, home);
  assert.equal(
    result.childCgroup,
    path.join(home, stepCgroupParentName(host.pid!), "worker-held"),
    JSON.stringify(result),
  );
  assert.equal(result.ownAfter, home, "the worker went home after the spawn");
  assert.equal(result.held, true);
  assert.equal(result.childSignal, "SIGKILL");
  assert.match(String(result.report), /the worker did not run for \d+ ms/);
  await new Promise((resolve) => host.once("exit", resolve));
  assert.deepEqual((await waitUntilNoMarker(marker, 2_000)).alive, [], "the child or its setsid daemon survived");
  assert.equal(fs.existsSync(path.join(home, stepCgroupParentName(host.pid!))), false, "its cgroups were left behind");
});

test("the warden never kills the worker: it moves a worker it finds in a step's cgroup to worker-held, then kills the rest", async () => {
  // A stand-in worker (a sleep) put into a step cgroup beside a step process, and a warden of it.
  const parent = path.join(place.home, `claimwatch-steps-test-${process.pid}`);
  const stepDir = path.join(parent, "step-1");
  fs.mkdirSync(stepDir, { recursive: true });
  const marker = newMarker();
  const env = { ...process.env, [marker.name]: marker.value };
  const worker = spawn("sleep", ["600"], { env, stdio: "ignore" });
  const stepProcess = spawn("sleep", ["600"], { env, stdio: "ignore" });
  try {
    for (const pid of [worker.pid!, stepProcess.pid!])
      fs.writeFileSync(path.join(stepDir, "cgroup.procs"), String(pid));
    const warden = spawn(process.execPath, ["lib/rebuilds/steps/warden-main.mjs", String(worker.pid)], {
      stdio: ["pipe", "pipe", "inherit"],
    });
    warden.stdin!.write(`silence 500\nwatch-cgroup 1 ${stepDir}\n`);
    const killed = await waitForLine(warden, /^killed 1 /, 10_000);
    assert.match(killed, /the worker did not run/);
    for (let i = 0; i < 50 && isRunning(stepProcess.pid!); i++) await new Promise((r) => setTimeout(r, 20));
    assert.equal(isRunning(stepProcess.pid!), false, "the step's process survived");
    assert.equal(isRunning(worker.pid!), true, "the warden killed the worker");
    assert.equal(ownCgroup(worker.pid!), path.join(home, path.basename(parent), "worker-held"));
    // EOF: the worker is gone as far as the warden knows; everything under the parent goes.
    warden.stdin!.end();
    await new Promise((resolve) => warden.once("exit", resolve));
    assert.equal(fs.existsSync(parent), false, "the warden left the parent behind");
  } finally {
    worker.kill("SIGKILL");
    stepProcess.kill("SIGKILL");
  }
});

/** A worker's start on this host, as far as containment goes (it removes leftover step cgroups): its mode on stdout. */
function startWorkerContainment() {
  return spawnSync(
    process.execPath,
    [
      "--import",
      "tsx",
      "-e",
      'import("./lib/rebuilds/steps/containment.ts").then((m) => console.log(m.detectContainment().mode))',
    ],
    { encoding: "utf8", timeout: 60_000 },
  );
}

test("a parent whose worker's PID now belongs to another process is a leftover; a live worker's parent is kept", async () => {
  // The stand-ins: a live process named as the maker of both parents, one with its own start
  // time (a live worker: kept), one with another (a dead worker whose PID was reused: removed).
  const live = spawn("sleep", ["600"], { stdio: "ignore" });
  const startTime = processStartTime(live.pid!);
  assert.ok(startTime, "no start time read");
  const kept = path.join(place.home, stepCgroupParentName(live.pid!));
  const reused = path.join(place.home, stepCgroupParentName(live.pid!, String(Number(startTime) - 1)));
  assert.equal(path.basename(kept).endsWith(`-${live.pid}-${startTime}`), true, kept);
  const marker = newMarker();
  const leftover = spawn("sleep", ["600"], { env: { ...process.env, [marker.name]: marker.value }, stdio: "ignore" });
  try {
    fs.mkdirSync(path.join(kept, "step-1"), { recursive: true });
    fs.mkdirSync(path.join(reused, "step-1"), { recursive: true });
    fs.writeFileSync(path.join(reused, "step-1", "cgroup.procs"), String(leftover.pid));
    const started = startWorkerContainment();
    assert.equal(started.stdout.trim(), "cgroup", started.stderr);
    assert.equal(fs.existsSync(reused), false, "the parent of a dead worker whose PID was reused is still there");
    assert.deepEqual((await waitUntilNoMarker(marker, 2_000)).alive, [], "its step survived");
    assert.equal(fs.existsSync(path.join(kept, "step-1")), true, "a live worker's parent was removed");
  } finally {
    live.kill("SIGKILL");
    leftover.kill("SIGKILL");
    for (const dir of [path.join(kept, "step-1"), kept, path.join(reused, "step-1"), reused])
      fs.rmSync(dir, { recursive: true, force: true });
  }
});

test("a dead worker's step cgroups are killed and removed when a worker starts on the host", async () => {
  const deadPid = spawnSync("true").pid;
  const parent = path.join(place.home, stepCgroupParentName(deadPid));
  fs.mkdirSync(path.join(parent, "step-3"), { recursive: true });
  const marker = newMarker();
  const leftover = spawn("sleep", ["600"], { env: { ...process.env, [marker.name]: marker.value }, stdio: "ignore" });
  fs.writeFileSync(path.join(parent, "step-3", "cgroup.procs"), String(leftover.pid));
  const started = startWorkerContainment();
  assert.equal(started.stdout.trim(), "cgroup", started.stderr);
  assert.equal(fs.existsSync(parent), false, "the dead worker's parent is still there");
  assert.deepEqual((await waitUntilNoMarker(marker, 2_000)).alive, []);
});
