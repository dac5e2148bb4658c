/**
 * Edges of step containment, with real processes: a worker that is PID 1 never uses `cgroup`
 * mode (it would collect its steps' zombies); a worker stopped between announcing a step and
 * spawning it does not run the step unwatched; a step whose cgroup cannot be emptied fails
 * instead of succeeding; a spawn with no process or no pipes (EMFILE) leaks nothing, and one
 * the kernel refuses for its size (E2BIG) fails for good; a burst of mount changes on the host
 * while a step enters the namespace for read-only builds does not fail the step.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { test } from "node:test";
import type { RunStep } from "../../lib/rebuilds/definitions";
import { ContainmentConfigError, detectContainment } from "../../lib/rebuilds/steps/containment";
import { runCommandStep } from "../../lib/rebuilds/steps/run-step";
import { stepTestBed } from "../support/step-bed";

const { dir, context } = stepTestBed("cw-edges-");

function step(run: string[]): RunStep {
  return { name: "s", run, transientExitCodes: [], killGrace: 3_000, limits: {} };
}

/** Runs `argv` to its end; its stdout and stderr. */
function runHost(argv: string[]): Promise<{ stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const host = spawn(argv[0]!, argv.slice(1), { stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    host.stdout.on("data", (chunk: Buffer) => (stdout += chunk.toString()));
    host.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
    host.once("close", () => resolve({ stdout, stderr }));
  });
}

test("a worker that is PID 1 does not use cgroup mode (it would inherit and never reap its steps' orphans): a PID namespace, and the detail says why", async () => {
  const asPid1 = detectContainment("auto", { pid: 1 });
  assert.equal(asPid1.mode, "pid-namespace", asPid1.detail);
  assert.match(asPid1.detail, /no cgroup per step: the worker is PID 1/);
  assert.throws(() => detectContainment("cgroup", { pid: 1 }), ContainmentConfigError);
  // For real: a worker started by `unshare --pid --fork` is PID 1 of its namespace.
  const { stdout, stderr } = await runHost([
    "unshare",
    "--pid",
    "--fork",
    "--",
    process.execPath,
    "--import",
    "tsx",
    "-e",
    'import("./lib/rebuilds/steps/containment.ts").then((m) => console.log(process.pid, m.detectContainment("auto").mode))',
  ]);
  assert.equal(stdout.trim(), "1 pid-namespace", stderr);
});

for (const mode of ["cgroup", "pid-namespace"])
  test(`${mode}: a worker stopped after announcing a step and before spawning it, past its warden's limit, kills the step and hands the job back`, async () => {
    const file = path.join(dir, `touched-${mode}`);
    const { stdout, stderr } = await runHost([
      process.execPath,
      "--import",
      "tsx",
      "test/support/spawn-stall-host.ts",
      mode,
      file,
    ]);
    const result = JSON.parse(stdout.trim() || "{}") as Record<string, unknown>;
    assert.equal(result.error, "WorkerStalledError", `${stdout}${stderr}`);
    assert.match(String(result.message), /did not run for \d+ ms|step warden/);
    assert.equal(result.touched, false, "the step ran unwatched after the stall");
  });

test("cgroup: a step whose cgroup cannot be emptied and removed after cgroup.kill fails (transient, naming the cgroup) and is not published", async () => {
  const containment = detectContainment("cgroup");
  const parent = containment.stepCgroups!.parent;
  // A child cgroup keeps the step's cgroup from being removed, as a process in uninterruptible
  // I/O would (the same `remove` that failed; a process cannot be kept alive through cgroup.kill
  // on purpose).
  const script = `for d in '${parent}'/step-*; do mkdir "$d/held"; done`;
  let error: Error | null;
  try {
    error = await runCommandStep(step(["sh", "-c", script]), context(), containment).then(
      () => null,
      (e: Error) => e,
    );
  } finally {
    for (const name of fs.readdirSync(parent).filter((n) => n.startsWith("step-"))) {
      const stepDir = path.join(parent, name);
      if (fs.existsSync(path.join(stepDir, "held"))) fs.rmdirSync(path.join(stepDir, "held"));
      fs.rmdirSync(stepDir);
    }
  }
  assert.equal(error?.name, "TransientStepError", String(error));
  assert.match(String(error?.message), new RegExp(`its cgroup ${parent}/step-\\d+ could not be emptied`));
});

for (const mode of ["cgroup", "pid-namespace"]) {
  test(`${mode}: a spawn that fails for want of file descriptors (EMFILE) is a transient failure and leaks no cgroup, watch or live step`, async () => {
    const { stdout, stderr } = await runHost([
      "sh",
      "-c",
      `ulimit -n 256; exec '${process.execPath}' --import tsx test/support/emfile-host.ts ${mode}`,
    ]);
    const result = JSON.parse(stdout.trim() || "{}") as Record<string, unknown>;
    assert.equal(result.error, "TransientStepError", `${stdout}${stderr}`);
    assert.match(String(result.message), /EMFILE/);
    assert.equal(result.live, 0, "the step is still listed as running");
    assert.deepEqual(result.stepCgroups, [], "its cgroup was left behind");
  });

  test(`${mode}: arguments larger than the kernel accepts (E2BIG) are a permanent failure with a clear reason`, async () => {
    const error = await runCommandStep(step(["true", "x".repeat(200_000)]), context(), detectContainment(mode)).then(
      () => null,
      (e: Error) => e,
    );
    assert.equal(error?.name, "StepFailedError", String(error));
    assert.match(String(error?.message), /larger than the kernel accepts \(E2BIG\)/);
  });
}

test("a burst of the worker's own mount changes while a step enters the read-only builds namespace is ridden out (four holders retired in turn, the fifth is used)", async (t) => {
  if (process.getuid?.() !== 0) return t.skip("no namespace for read-only builds when not root");
  // In a mount namespace of its own with private propagation: every change it makes is a
  // difference for its holders (none propagates), and no other test's mount reaches it.
  const { stdout, stderr } = await runHost([
    "unshare",
    "--mount",
    "--propagation",
    "private",
    "--",
    process.execPath,
    "--import",
    "tsx",
    "test/support/namespace-churn-host.ts",
    fs.mkdtempSync(path.join(dir, "churn-")),
    "4",
  ]);
  const result = JSON.parse(stdout.trim() || "{}") as Record<string, unknown>;
  assert.equal(result.error, null, `${stdout}${stderr}`);
  assert.equal(result.toggles, 4, "the mounts changed under four holders");
  assert.equal(result.generation, 5, "four holders retired for the changes, the fifth used");
  assert.equal(result.current, true);
});
