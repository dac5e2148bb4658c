/**
 * A stand-in worker stopped after it announced a step to its warden (and passed the stall check)
 * but before the spawn, for longer than the warden's silence limit (1 s): the test hook SIGSTOPs
 * it and a helper sends SIGCONT 2.5 s later. The step would touch a file after 1 s. Prints one
 * JSON line: { error, message, touched }.
 *   node --import tsx test/support/spawn-stall-host.ts <cgroup|pid-namespace> <file>
 */
import { spawn } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { runCommandStep, stepTestHooks } from "../../lib/rebuilds/steps/run-step";
import { startStandInWorker } from "./stand-in-worker";
import { stepContext } from "./step-context";

const [mode, file] = process.argv.slice(2) as [string, string];
const containment = await startStandInWorker(mode, 1_000);
/** The step's work and output directory (a root worker makes `builds/` in it), removed at the end. */
const scratch = fs.mkdtempSync(path.join(os.tmpdir(), "cw-step-host-"));
stepTestHooks.beforeSpawn = () => {
  stepTestHooks.beforeSpawn = undefined;
  spawn("sh", ["-c", `sleep 2.5; kill -CONT ${process.pid}`], { detached: true, stdio: "ignore" }).unref();
  process.kill(process.pid, "SIGSTOP");
};
const error = await runCommandStep(
  {
    name: "s",
    run: ["sh", "-c", `sleep 1; touch '${file}'`],
    transientExitCodes: [],
    killGrace: 3_000,
    limits: {},
  },
  stepContext(scratch, { attemptBegan: performance.now() }),
  containment,
).then(
  () => null,
  (e: Error) => e,
);
await new Promise((r) => setTimeout(r, 1_500)); // the program would have touched the file by now
process.stdout.write(
  `${JSON.stringify({ error: error?.name ?? null, message: error?.message ?? null, touched: fs.existsSync(file) })}\n`,
);
fs.rmSync(scratch, { recursive: true, force: true });
process.exit(0);
