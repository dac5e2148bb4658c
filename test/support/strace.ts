/**
 * strace attached to a running process to hold back or fail its system calls (faults.md: a slow
 * or failing disk at the worst moment).
 */
import { spawn } from "node:child_process";
import fs from "node:fs";
import type { TestContext } from "node:test";

/**
 * strace with `args` attached to every thread of `pid` (and the threads it starts), from one
 * second on; stopped (SIGINT: held-back calls go on) by the function returned, or with the test.
 */
export async function injectInto(t: TestContext, pid: number, args: string[]): Promise<() => void> {
  const threads = fs.readdirSync(`/proc/${pid}/task`).flatMap((tid) => ["-p", tid]);
  const tracer = spawn("strace", ["-qq", "-f", ...threads, ...args, "-o", "/dev/null"], { stdio: "ignore" });
  // SIGINT detaches; a tracer that does not go within 2 s (one holding a tracee that was killed
  // in a delayed call keeps it, and its open files, until it lets go) is SIGKILLed.
  const stop = () => {
    if (tracer.exitCode !== null || tracer.signalCode !== null) return;
    tracer.kill("SIGINT");
    setTimeout(() => {
      if (tracer.exitCode === null && tracer.signalCode === null) tracer.kill("SIGKILL");
    }, 2_000).unref();
  };
  t.after(stop);
  await new Promise((resolve) => setTimeout(resolve, 1_000)); // attached
  return stop;
}
