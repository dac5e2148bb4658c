/**
 * A stand-in worker that runs a step with every file descriptor but one in use, so that the
 * spawn itself fails with EMFILE (its pipes need two). Prints one JSON line:
 *   { error, message, live, stepCgroups }  (live: steps still listed; stepCgroups: left behind)
 *   sh -c 'ulimit -n 256; exec node --import tsx test/support/emfile-host.ts <cgroup|pid-namespace>'
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { killAllSteps, runCommandStep } from "../../lib/rebuilds/steps/run-step";
import { startStandInWorker } from "./stand-in-worker";
import { stepContext } from "./step-context";

const containment = await startStandInWorker(process.argv[2], 0);
/** The step's work and output directory (a root worker makes `builds/` in it), removed at the end. */
const scratch = fs.mkdtempSync(path.join(os.tmpdir(), "cw-step-host-"));
const hoard: number[] = [];
for (;;) {
  try {
    hoard.push(fs.openSync("/dev/null", "r"));
  } catch {
    break;
  }
}
fs.closeSync(hoard.pop()!);
const running = runCommandStep(
  { name: "s", run: ["true"], transientExitCodes: [], killGrace: 3_000, limits: {} },
  stepContext(scratch),
  containment,
); // the spawn ran synchronously
for (const fd of hoard) fs.closeSync(fd);
const error = await running.then(
  () => null,
  (e: Error) => e,
);
const parent = containment.stepCgroups?.parent;
const stepCgroups = parent && fs.existsSync(parent) ? fs.readdirSync(parent).filter((n) => n.startsWith("step-")) : [];
process.stdout.write(
  `${JSON.stringify({ error: error?.name ?? null, message: error?.message ?? null, live: killAllSteps(), stepCgroups })}\n`,
);
fs.rmSync(scratch, { recursive: true, force: true });
process.exit(0);
