/**
 * `run` steps: an argv array, executed without a shell (a user who wants one writes `sh -c`).
 * Output goes to the run log line by line. On abort: SIGTERM to the program's process group,
 * SIGKILL after the grace period. Exit codes listed in `transientExitCodes` are transient.
 * The program runs under step-guard.mjs, which stops it if this worker dies (SIGKILL included).
 */
import { spawn } from "node:child_process";
import path from "node:path";
import { fileURLToPath } from "node:url";
import type { RunStep } from "../definitions";
import { expandPlaceholders, StepFailedError, TransientStepError, type StepContext } from "./context";

/** Longest log line kept; longer lines are cut (binary output must not flood the log). */
const MAX_LINE = 2_000;
const GUARD = fileURLToPath(new URL("./step-guard.mjs", import.meta.url));
/** The guard's exit code for a program that could not be started. */
const NOT_STARTED = 127;

export async function runCommandStep(step: RunStep, context: StepContext): Promise<void> {
  context.signal.throwIfAborted();
  const [program, ...args] = step.run.map((arg) => expandPlaceholders(arg, context));
  const cwd = step.cwd ? path.resolve(context.baseDir, expandPlaceholders(step.cwd, context)) : context.workDir;
  const env = {
    ...process.env,
    ...Object.fromEntries(Object.entries(step.env ?? {}).map(([k, v]) => [k, expandPlaceholders(v, context)])),
    CLAIMWATCH_WORK: context.workDir,
    CLAIMWATCH_VERSION: context.version,
    CLAIMWATCH_REBUILD: context.rebuild,
    CLAIMWATCH_TENANT: context.tenant ?? "",
    CLAIMWATCH_RUN_ID: context.runId,
  };

  // stdin is the guard's lifeline: it closes when this process dies, however it dies.
  const child = spawn(process.execPath, [GUARD, String(step.killGrace), program!, ...args], {
    cwd,
    env,
    stdio: ["pipe", "pipe", "pipe"],
    detached: true,
  });
  child.stdin!.on("error", () => {}); // EPIPE once the guard has exited
  const pipeLines = (stream: NodeJS.ReadableStream, label: string) => {
    let rest = "";
    stream.setEncoding("utf8");
    stream.on("data", (chunk: string) => {
      const lines = (rest + chunk).split("\n");
      rest = lines.pop() ?? "";
      for (const line of lines) context.log(`[${step.name}${label}] ${line.slice(0, MAX_LINE)}`);
      if (rest.length > MAX_LINE) {
        context.log(`[${step.name}${label}] ${rest.slice(0, MAX_LINE)}`);
        rest = "";
      }
    });
    stream.on("end", () => rest && context.log(`[${step.name}${label}] ${rest.slice(0, MAX_LINE)}`));
  };
  pipeLines(child.stdout!, "");
  pipeLines(child.stderr!, " stderr");

  let killTimer: NodeJS.Timeout | undefined;
  const signalGroup = (signal: NodeJS.Signals) => {
    try {
      process.kill(-child.pid!, signal); // the whole group: `sh -c` children too
    } catch {
      child.kill(signal);
    }
  };
  const onAbort = () => {
    context.log(`[${step.name}] aborting: SIGTERM, SIGKILL in ${step.killGrace} ms`);
    signalGroup("SIGTERM");
    killTimer = setTimeout(() => signalGroup("SIGKILL"), step.killGrace);
  };
  context.signal.addEventListener("abort", onAbort, { once: true });

  const outcome = await new Promise<{ code: number | null; signal: NodeJS.Signals | null; error?: Error }>(
    (resolve) => {
      child.once("error", (error) => resolve({ code: null, signal: null, error }));
      child.once("close", (code, signal) => resolve({ code, signal }));
    },
  );
  context.signal.removeEventListener("abort", onAbort);
  if (killTimer) clearTimeout(killTimer);

  context.signal.throwIfAborted();
  if (outcome.error) {
    const code = (outcome.error as NodeJS.ErrnoException).code;
    if (code === "ENOENT") throw new StepFailedError(`step ${step.name}: program not found: ${program}`);
    if (code && TRANSIENT_ERRNO.has(code)) throw new TransientStepError(`step ${step.name}: ${outcome.error.message}`);
    throw new StepFailedError(`step ${step.name}: ${outcome.error.message}`);
  }
  if (outcome.code === 0) return;
  if (outcome.code === NOT_STARTED)
    throw new StepFailedError(`step ${step.name}: program not found or not executable: ${program}`);
  if (outcome.code !== null && step.transientExitCodes.includes(outcome.code)) {
    throw new TransientStepError(`step ${step.name} exited ${outcome.code} (declared transient)`);
  }
  throw new StepFailedError(
    `step ${step.name} ${outcome.code === null ? `was killed by ${outcome.signal}` : `exited ${outcome.code}`}`,
  );
}

/** errno codes that describe a passing condition: worth another attempt. */
export const TRANSIENT_ERRNO = new Set([
  "EIO",
  "EAGAIN",
  "EBUSY",
  "ECONNRESET",
  "ECONNREFUSED",
  "ETIMEDOUT",
  "EPIPE",
  "ENETUNREACH",
  "EHOSTUNREACH",
  "EAI_AGAIN",
  "EMFILE",
  "ENFILE",
  "ENOSPC",
]);
