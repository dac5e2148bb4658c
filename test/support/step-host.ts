/**
 * A stand-in worker for containment tests: runs one `run` step with runCommandStep (the worker's
 * own code), prints "running" once the step is up and "aborted" after it aborted it (when
 * STEP_ABORT_AFTER_MS is set), and otherwise waits. Tests SIGKILL this process to see what its
 * step does when its worker dies.
 *   node --import tsx test/support/step-host.ts <script> <killGraceMs>
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { runCommandStep } from "../../lib/rebuilds/steps/run-step";

const [script, grace] = process.argv.slice(2);
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "cw-step-host-"));
const controller = new AbortController();
const abortAfter = Number(process.env.STEP_ABORT_AFTER_MS ?? NaN);
if (Number.isFinite(abortAfter)) {
  setTimeout(() => {
    controller.abort(new Error("aborted by the host"));
    process.stdout.write("aborted\n");
  }, abortAfter);
}
setTimeout(() => process.stdout.write("running\n"), 200);
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
    log: () => {},
    progress: () => {},
  },
).catch(() => {});
process.stdout.write("step ended\n");
