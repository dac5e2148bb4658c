/**
 * Finding a test's processes by a marker in their environment, the way faults.md suggests: a
 * process can leave its group, its session and its parent, but it keeps the environment it was
 * started with. Reads /proc/<pid>/environ of every process (needs root for other users' processes).
 */
import crypto from "node:crypto";
import fs from "node:fs";

const issued: { name: string; value: string }[] = [];

/** A fresh `NAME=value` marker for one test's step environment. */
export function newMarker(): { name: string; value: string } {
  const marker = { name: "CLAIMWATCH_TEST_MARKER", value: crypto.randomBytes(8).toString("hex") };
  issued.push(marker);
  return marker;
}

/**
 * SIGKILLs every process still carrying a marker this test file issued: a test that failed (or
 * found an escapee) must not leave it running. Call it from `after`.
 */
export function killMarkedProcesses(): number[] {
  const killed: number[] = [];
  for (const marker of issued) {
    for (const pid of pidsWithMarker(marker)) {
      try {
        process.kill(pid, "SIGKILL");
        killed.push(pid);
      } catch {
        // gone already
      }
    }
  }
  return killed;
}

/** PIDs of live (non-zombie) processes whose environment holds `name=value`. */
export function pidsWithMarker(marker: { name: string; value: string }): number[] {
  const needle = Buffer.from(`\0${marker.name}=${marker.value}\0`);
  const found: number[] = [];
  for (const entry of fs.readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const environ = Buffer.concat([Buffer.from("\0"), fs.readFileSync(`/proc/${entry}/environ`), Buffer.from("\0")]);
      if (!environ.includes(needle)) continue;
      if (fs.readFileSync(`/proc/${entry}/stat`, "utf8").includes(") Z ")) continue;
      found.push(Number(entry));
    } catch {
      // exited while reading, or not ours to read
    }
  }
  return found;
}

/** Polls until no process carries the marker; returns the survivors after `timeoutMs` (and how long it took). */
export async function waitUntilNoMarker(
  marker: { name: string; value: string },
  timeoutMs: number,
): Promise<{ alive: number[]; ms: number }> {
  const start = performance.now();
  let alive = pidsWithMarker(marker);
  while (alive.length > 0 && performance.now() - start < timeoutMs) {
    await new Promise((r) => setTimeout(r, 50));
    alive = pidsWithMarker(marker);
  }
  return { alive, ms: Math.round(performance.now() - start) };
}
