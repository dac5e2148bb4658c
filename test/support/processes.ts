/** Process helpers for tests that start real processes and must prove they stopped them. */
import { execFile, type ChildProcess } from "node:child_process";
import fs from "node:fs";

/** All descendants of `pid` (children, grandchildren …), read from /proc. */
export function descendantPids(pid: number): number[] {
  const parentOf = new Map<number, number>();
  for (const entry of fs.readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = fs.readFileSync(`/proc/${entry}/stat`, "utf8");
      // Field 4 is the parent PID; the command name (field 2) may contain spaces, so parse after ')'.
      const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
      parentOf.set(Number(entry), ppid);
    } catch {
      // exited while reading
    }
  }
  const found: number[] = [];
  const queue = [pid];
  while (queue.length > 0) {
    const current = queue.shift()!;
    for (const [child, parent] of parentOf) {
      if (parent === current) {
        found.push(child);
        queue.push(child);
      }
    }
  }
  return found;
}

export function isRunning(pid: number): boolean {
  try {
    process.kill(pid, 0);
    // A zombie still answers kill(0); it is gone for our purposes.
    return !fs.readFileSync(`/proc/${pid}/stat`, "utf8").includes(") Z ");
  } catch {
    return false;
  }
}

/** Waits until every PID has exited; returns those still running after `timeoutMs`. */
export async function waitUntilGone(pids: number[], timeoutMs: number): Promise<number[]> {
  const deadline = Date.now() + timeoutMs;
  let alive = pids.filter(isRunning);
  while (alive.length > 0 && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 100));
    alive = alive.filter(isRunning);
  }
  return alive;
}

/** Resolves with the first stdout/stderr line matching `pattern`; rejects on exit or timeout. */
export function waitForLine(child: ChildProcess, pattern: RegExp, timeoutMs: number): Promise<string> {
  return new Promise((resolve, reject) => {
    let buffered = "";
    const onData = (chunk: Buffer) => {
      buffered += chunk.toString();
      const line = buffered.split("\n").find((l) => pattern.test(l));
      if (line !== undefined) finish(() => resolve(line));
    };
    const onExit = (code: number | null) =>
      finish(() => reject(new Error(`process exited (${code}) before printing ${pattern}:\n${buffered.slice(-2000)}`)));
    const timer = setTimeout(
      () =>
        finish(() =>
          reject(new Error(`no line matching ${pattern} within ${timeoutMs} ms:\n${buffered.slice(-2000)}`)),
        ),
      timeoutMs,
    );
    const finish = (settle: () => void) => {
      clearTimeout(timer);
      child.stdout?.off("data", onData);
      child.stderr?.off("data", onData);
      child.off("exit", onExit);
      settle();
    };
    child.stdout?.on("data", onData);
    child.stderr?.on("data", onData);
    child.once("exit", onExit);
  });
}

/**
 * Runs a TypeScript entry point (`node --import tsx script args…`) to its end, without a shell:
 * its exit status (null when a signal or the 60 s limit ended it) and its output.
 */
export function runTsx(
  script: string,
  args: string[] = [],
  env: Record<string, string> = {},
): Promise<{ status: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      ["--import", "tsx", script, ...args],
      { encoding: "utf8", timeout: 60_000, env: { ...process.env, ...env } },
      (error, stdout, stderr) =>
        resolve({ status: error ? (typeof error.code === "number" ? error.code : null) : 0, stdout, stderr }),
    );
  });
}
