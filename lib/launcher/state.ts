/**
 * What a running `npm start` owns, recorded in the data dir: its own pid and each child's pid
 * and process start time. A launcher that is SIGKILLed (OOM killer, `kill -9`) cannot stop its
 * children; the next `npm start` on the data dir finds them here and stops them before it
 * starts — only processes whose pid AND start time match the record (a reused pid is never
 * touched), each by its process group (its children with it), in the launcher's shutdown order.
 * Linux (/proc); elsewhere nothing is recognised and a stale record is simply refused.
 */
import fs from "node:fs";
import path from "node:path";

export interface OwnedProcess {
  name: string;
  pid: number;
  /** Start time from /proc/<pid>/stat (clock ticks since boot); null where /proc is missing. */
  startTime: number | null;
}

export interface LauncherState {
  launcher: OwnedProcess;
  /** In shutdown order: worker, web, embedded Redis. */
  children: OwnedProcess[];
}

export function launcherStatePath(dataDir: string): string {
  return path.join(dataDir, "launcher.json");
}

/** Start time of `pid` as /proc/<pid>/stat field 22, or null (gone, or no /proc). */
export function processStartTime(pid: number): number | null {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8");
    // Fields after the command name (which may contain spaces and parentheses): state is field 3.
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    const value = Number(fields[22 - 3]);
    return Number.isFinite(value) ? value : null;
  } catch {
    return null;
  }
}

export function ownedProcess(name: string, pid: number): OwnedProcess {
  return { name, pid, startTime: processStartTime(pid) };
}

/** True when `owned` is still the very process that was recorded (not a reused pid). */
export function isSameProcess(owned: OwnedProcess): boolean {
  if (owned.startTime === null) return false;
  return processStartTime(owned.pid) === owned.startTime;
}

export function writeLauncherState(dataDir: string, state: LauncherState): void {
  const file = launcherStatePath(dataDir);
  fs.writeFileSync(`${file}.tmp`, JSON.stringify(state) + "\n");
  fs.renameSync(`${file}.tmp`, file);
}

export function readLauncherState(dataDir: string): LauncherState | undefined {
  try {
    const state = JSON.parse(fs.readFileSync(launcherStatePath(dataDir), "utf8")) as LauncherState;
    return state && state.launcher && Array.isArray(state.children) ? state : undefined;
  } catch {
    return undefined;
  }
}

export function clearLauncherState(dataDir: string): void {
  fs.rmSync(launcherStatePath(dataDir), { force: true });
}

/**
 * Stops the recorded children of a launcher that is gone, in order: SIGCONT + SIGTERM to each
 * process group, SIGKILL after `graceMs`. Returns the processes it stopped.
 */
export async function stopOrphans(state: LauncherState, graceMs: number): Promise<OwnedProcess[]> {
  const stopped: OwnedProcess[] = [];
  for (const child of state.children) {
    if (!isSameProcess(child)) continue;
    signalGroup(child.pid, "SIGCONT");
    signalGroup(child.pid, "SIGTERM");
    const deadline = Date.now() + graceMs;
    while (isRunning(child) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
    if (isRunning(child)) {
      signalGroup(child.pid, "SIGKILL");
      while (isRunning(child)) await new Promise((r) => setTimeout(r, 50));
    }
    stopped.push(child);
  }
  return stopped;
}

/** The recorded process, still there and not a zombie waiting for a reaper. */
function isRunning(owned: OwnedProcess): boolean {
  return isSameProcess(owned) && processState(owned.pid) !== "Z";
}

function signalGroup(pid: number, signal: NodeJS.Signals): void {
  for (const target of [-pid, pid]) {
    try {
      process.kill(target, signal);
      return;
    } catch {
      // not a group leader (or gone): try the process itself
    }
  }
}

function processState(pid: number): string | null {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8");
    return stat.slice(stat.lastIndexOf(")") + 2).split(" ")[0] ?? null;
  } catch {
    return null;
  }
}
