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
  const stop = () => {
    if (tracer.exitCode === null && tracer.signalCode === null) tracer.kill("SIGINT");
  };
  t.after(stop);
  await new Promise((resolve) => setTimeout(resolve, 1_000)); // attached
  return stop;
}
