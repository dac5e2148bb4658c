/**
 * A stand-in worker for containment tests: runs one `run` step with runCommandStep (the worker's
 * own code), prints "running" once the step is up and "aborted" after it aborted it (when
 * STEP_ABORT_AFTER_MS is set: that long after the step's first output line), and otherwise waits; at the end "step ended: ok" or the error.
 * Tests SIGKILL, SIGSTOP or block this process to see what its step does when its worker dies
 * or stops running.
 *   node --import tsx test/support/step-host.ts <script> <killGraceMs>
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { runCommandStep } from "../../lib/rebuilds/steps/run-step";
import { stepWarden } from "../../lib/rebuilds/steps/warden";

const [script, grace] = process.argv.slice(2);

/**
 * A blocked event loop for `ms`: no timer, no I/O, no beat to the warden. The thread sleeps
 * (Atomics.wait) rather than spins, so a test running beside this one keeps its CPU.
 */
function blockEventLoop(ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}
// The warden's silence limit (the worker sets its job lock duration), and a blocked event loop:
// STEP_HOST_BLOCK_MS of it, STEP_HOST_BLOCK_AFTER_MS after start.
if (process.env.STEP_HOST_SILENCE_MS) stepWarden.start(Number(process.env.STEP_HOST_SILENCE_MS));
const blockMs = Number(process.env.STEP_HOST_BLOCK_MS ?? 0);
if (blockMs > 0) {
  setTimeout(
    () => {
      process.stdout.write("blocking\n");
      blockEventLoop(blockMs);
      process.stdout.write("unblocked\n");
    },
    Number(process.env.STEP_HOST_BLOCK_AFTER_MS ?? 500),
  );
}
// Its own temporary directory, removed when it exits; one killed with SIGKILL leaves it, so the
// test that kills it names one (STEP_HOST_DIR) and removes that itself.
const dir = process.env.STEP_HOST_DIR ?? fs.mkdtempSync(path.join(os.tmpdir(), "cw-step-host-"));
if (!process.env.STEP_HOST_DIR) process.on("exit", () => fs.rmSync(dir, { recursive: true, force: true }));
const controller = new AbortController();
// STEP_ABORT_AFTER_MS after the step's first output line (the program runs then: its start may
// take a while on a loaded host, and an abort before it would start nothing).
const abortAfter = Number(process.env.STEP_ABORT_AFTER_MS ?? NaN);
let abortArmed = false;
const armAbort = () => {
  if (!Number.isFinite(abortAfter) || abortArmed) return;
  abortArmed = true;
  setTimeout(() => {
    controller.abort(new Error("aborted by the host"));
    process.stdout.write("aborted\n");
  }, abortAfter);
};
setTimeout(() => process.stdout.write("running\n"), 200);
const attemptBegan = performance.now();
// A stall after the attempt began and before its step (STEP_HOST_BLOCK_BEFORE_MS): the beat
// timer must see it, so the loop gets one turn after it.
const blockBefore = Number(process.env.STEP_HOST_BLOCK_BEFORE_MS ?? 0);
if (blockBefore > 0) {
  await new Promise((r) => setTimeout(r, 100));
  blockEventLoop(blockBefore);
  await new Promise((r) => setTimeout(r, 0));
}
await runCommandStep(
  { name: "hosted", run: ["sh", "-c", script!], transientExitCodes: [], killGrace: Number(grace), limits: {} },
  {
    signal: controller.signal,
    workDir: dir,
    outputDir: dir,
    baseDir: dir,
    version: "v",
    tenant: undefined,
    rebuild: "r",
    runId: "host-a1",
    fence: 1,
    attemptBegan,
    log: armAbort,
    progress: () => {},
  },
).then(
  () => process.stdout.write("step ended: ok\n"),
  (error: Error) => process.stdout.write(`step ended: ${error.name}: ${error.message}\n`),
);
