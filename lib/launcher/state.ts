/**
 * What a running `npm start` owns, recorded in the data dir: the boot it ran in, its own pid
 * and each child's pid and process start time. A launcher that is SIGKILLed (OOM killer,
 * `kill -9`) cannot stop its children; the next `npm start` on the data dir finds them here and
 * stops them before it starts — only processes of the same boot whose pid AND start time match
 * the record (a reused pid is never touched), each by its process group (its children with it),
 * in the launcher's shutdown order. Without /proc (not Linux) nothing can be recognised: a live
 * recorded launcher pid is then taken as running, and nothing is stopped.
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
  /** /proc/sys/kernel/random/boot_id when recorded: start times count from boot. */
  bootId: string | null;
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

/** Records `pid` (just started by this process) as owned. */
export function ownedProcess(name: string, pid: number): OwnedProcess {
  return { name, pid, startTime: processStartTime(pid) };
}

export function currentBootId(): string | null {
  try {
    return fs.readFileSync("/proc/sys/kernel/random/boot_id", "utf8").trim() || null;
  } catch {
    return null;
  }
}

/**
 * True when `owned`, recorded in boot `bootId`, is still the very process that was recorded
 * (same boot, same pid, same start time): never a reused pid, never this process.
 */
export function isSameProcess(owned: OwnedProcess, bootId: string | null): boolean {
  if (owned.pid === process.pid || owned.startTime === null || bootId === null) return false;
  return bootId === currentBootId() && processStartTime(owned.pid) === owned.startTime;
}

/**
 * Whether the recorded launcher still runs. Where it cannot be recognised (no /proc), a live
 * pid counts as running: refusing to start is the safe side.
 */
export function isLauncherRunning(state: LauncherState): boolean {
  const { launcher, bootId } = state;
  if (launcher.startTime !== null && bootId !== null) return isSameProcess(launcher, bootId);
  if (launcher.pid === process.pid) return false;
  try {
    process.kill(launcher.pid, 0);
    return true;
  } catch {
    return false;
  }
}

export function writeLauncherState(dataDir: string, state: LauncherState): void {
  const file = launcherStatePath(dataDir);
  fs.writeFileSync(`${file}.tmp`, JSON.stringify(state) + "\n");
  fs.renameSync(`${file}.tmp`, file);
}

export function readLauncherState(dataDir: string): LauncherState | undefined {
  try {
    const state = JSON.parse(fs.readFileSync(launcherStatePath(dataDir), "utf8")) as LauncherState;
    return state && state.launcher && Array.isArray(state.children)
      ? { ...state, bootId: state.bootId ?? null }
      : undefined;
  } catch {
    return undefined;
  }
}

export function clearLauncherState(dataDir: string): void {
  fs.rmSync(launcherStatePath(dataDir), { force: true });
}

/**
 * Stops the recorded children of a launcher that is gone, in order: SIGCONT + SIGTERM to each
 * process group, SIGKILL after `graceMs`. Returns the processes it stopped, and those that did
 * not go even after SIGKILL (e.g. stuck in uninterruptible I/O) within a further `graceMs`.
 */
export async function stopOrphans(
  state: LauncherState,
  graceMs: number,
): Promise<{ stopped: OwnedProcess[]; stuck: OwnedProcess[] }> {
  const stopped: OwnedProcess[] = [];
  const stuck: OwnedProcess[] = [];
  const running = (child: OwnedProcess) => isSameProcess(child, state.bootId) && processState(child.pid) !== "Z";
  const waitGone = async (child: OwnedProcess, ms: number) => {
    const deadline = Date.now() + ms;
    while (running(child) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
    return !running(child);
  };
  for (const child of state.children) {
    if (!running(child)) continue;
    signalGroup(child.pid, "SIGCONT");
    signalGroup(child.pid, "SIGTERM");
    if (!(await waitGone(child, graceMs))) {
      signalGroup(child.pid, "SIGKILL");
      if (!(await waitGone(child, graceMs))) {
        stuck.push(child);
        continue;
      }
    }
    stopped.push(child);
  }
  return { stopped, stuck };
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
