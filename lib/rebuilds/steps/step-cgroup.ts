/**
 * `cgroup` containment (containment.ts): a cgroup v2 per step, born with the program and ended
 * with `cgroup.kill`. No shim process: the worker, in one synchronous JS turn, moves itself into
 * the step's new cgroup, spawns the program (libuv forks synchronously, so the child is born in
 * that cgroup and everything it ever starts stays in it — setsid and double forks change the
 * session or the parent, never the cgroup), and moves itself back home (`spawnInside`).
 *
 * Layout: `<home>/claimwatch-steps-<pid namespace>-<worker pid>-<its start time>/step-<n>`, where `<home>` is the
 * worker's own v2 cgroup. One parent per worker, so workers never touch each other's steps; the
 * parents of dead workers (and one left under this worker's own PID by a predecessor) are removed
 * at start — only those of this PID namespace, whose PIDs this process can check (two containers
 * may share a cgroup).
 *
 * Contract with the step warden (warden-main.mjs, which repeats the names below): a step's
 * cgroup is announced to the warden before the worker enters it, so the warden knows every
 * cgroup the worker can be inside. The warden never kills a cgroup the worker is in: if the
 * worker is in it (SIGSTOPped mid-spawn), the warden first moves the worker into
 * `<parent>/worker-held`. A fork the worker makes after it resumes then lands in `worker-held`,
 * never in its home cgroup, where nothing would find it; the worker sees `worker-held` right
 * after the spawn (`heldByWarden`), leaves it and kills it.
 *
 * The warden is one process beside the worker: killed together with it (`kill -9` of both,
 * `pkill -9 node`), it could not end the steps (helper-135). So each worker also starts a keeper
 * (`STEP_KEEPER`), once: a small shell, not Node, in a process group of its own, reading a pipe
 * whose only other end this worker holds and never writes. When the worker dies, however, the
 * pipe ends and the keeper writes `cgroup.kill` of every step cgroup under the worker's parent —
 * the warden's EOF rule, held by a second process that dies neither with the warden nor with
 * `pkill node`. It costs a step nothing (review helper-139: a guard spawned per step cost a fork
 * of the whole worker, ~10 ms). A worker that finds its keeper gone starts another.
 */
import { spawn as spawnProcess, type ChildProcess } from "node:child_process";
import fs from "node:fs";
import path from "node:path";

/** Where the warden puts a worker it found inside a step's cgroup (warden-main.mjs). */
export const WORKER_HELD = "worker-held";
const PARENT_PREFIX = `claimwatch-steps-${pidNamespaceId()}-`;
/** How long a killed cgroup may take to empty before it is left for the next clean-up. */
const EMPTY_WAIT_MS = 5_000;

export interface StepCgroupPlace {
  /** The worker's own cgroup v2 directory; it returns here after each spawn. */
  home: string;
  /** This worker's parent of step cgroups: `<home>/${stepCgroupParentName(pid)}`. */
  parent: string;
}

/**
 * Makes this worker's parent of step cgroups and proves the mechanism works here: a step cgroup
 * with `cgroup.kill` can be made and this process can enter it and return home. Removes parents
 * left by dead workers first. Returns why not when it cannot (the caller falls back).
 */
export function prepareStepCgroups(): StepCgroupPlace | { unavailable: string } {
  // Once per process: a second clean-up would take this process's own live steps for leftovers.
  prepared ??= prepareOnce();
  return prepared;
}

let prepared: StepCgroupPlace | { unavailable: string } | undefined;

function prepareOnce(): StepCgroupPlace | { unavailable: string } {
  const home = ownCgroupV2Directory();
  if (typeof home !== "string") return home;
  removeLeftovers(home);
  const place = { home, parent: path.join(home, stepCgroupParentName(process.pid)) };
  const probe = path.join(place.parent, "probe");
  let why: string | null = null;
  try {
    fs.mkdirSync(place.parent);
    fs.mkdirSync(probe);
  } catch (error) {
    rmdirQuietly(place.parent);
    return { unavailable: `cannot make a cgroup in ${home} (${(error as NodeJS.ErrnoException).code})` };
  }
  if (!fs.existsSync(path.join(probe, "cgroup.kill"))) why = "the kernel has no cgroup.kill (Linux < 5.14)";
  else {
    try {
      fs.writeFileSync(path.join(probe, "cgroup.procs"), String(process.pid));
      returnHome(place);
    } catch (error) {
      why = `cannot move the worker between cgroups (${(error as NodeJS.ErrnoException).code})`;
    }
  }
  rmdirQuietly(probe);
  if (why === null) {
    // A worker that ran no step has no warden to remove its (empty) parent.
    process.once("exit", () => rmdirQuietly(place.parent));
    return place;
  }
  rmdirQuietly(place.parent);
  return { unavailable: why };
}

/**
 * The name of the parent of worker `pid`'s step cgroups (a worker of this PID namespace):
 * `claimwatch-steps-<pid namespace>-<pid>-<start time>`. The start time (`processStartTime`, 0
 * for a process that is gone) tells a worker from a later process given the same PID: a keeper
 * or warden of a dead worker that wakes late (stopped, then continued) kills only its own
 * worker's parent, never that of a successor with the same PID, and a parent whose PID now
 * belongs to another process is known for a leftover.
 */
export function stepCgroupParentName(pid: number, startTime: string = processStartTime(pid) ?? "0"): string {
  return `${PARENT_PREFIX}${pid}-${startTime}`;
}

/** When process `pid` started (`/proc/<pid>/stat` field 22, clock ticks since boot), or null when it is gone. */
export function processStartTime(pid: number): string | null {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8");
    // Fields after the command name, which may hold spaces and parentheses: the last ")" ends it.
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    const startTime = fields[22 - 3];
    return startTime && /^\d+$/.test(startTime) ? startTime : null;
  } catch {
    return null;
  }
}

/**
 * Whether the worker a parent's name (after PARENT_PREFIX) names still runs: its PID is alive and,
 * where the name has one, started when the name says (an older name has only the PID).
 */
function ownerRuns(owner: string): { pid: number; runs: boolean } | null {
  const match = /^(\d+)(?:-(\d+))?$/.exec(owner);
  if (!match) return null;
  const pid = Number(match[1]);
  if (!isAlive(pid)) return { pid, runs: false };
  return { pid, runs: match[2] === undefined || processStartTime(pid) === match[2] };
}

/** The inode of this process's PID namespace (`pid:[4026531836]`), or 0 where it cannot be read. */
function pidNamespaceId(): string {
  try {
    return /\[(\d+)\]/.exec(fs.readlinkSync("/proc/self/ns/pid"))?.[1] ?? "0";
  } catch {
    return "0";
  }
}

/** One line of /proc/self/mountinfo, its fields as the kernel wrote them (octal escapes such as `\040` kept). */
export interface CgroupMount {
  /** Field 4: the root of the mount within its filesystem ("" where the line has none). */
  root: string;
  /** Field 5: where it is mounted ("" where the line has none). */
  mountPoint: string;
  /** Field 6: the mount's own options (`rw`, `nosuid`, …). */
  mountOptions: string[];
  /** The first field after ` - `: `cgroup2`, `cgroup`, `proc`, … */
  fsType: string;
  /** The third field after ` - `: the filesystem's options (a v1 hierarchy's controllers among them). */
  superOptions: string[];
}

/**
 * This process's mounts (every /proc/self/mountinfo line with a ` - ` separator, in the file's
 * order) and the text of /proc/self/cgroup, or null when either file cannot be read. Read anew
 * on every call.
 */
export function cgroupMounts(): { mounts: CgroupMount[]; ownCgroups: string } | null {
  let mountinfo: string;
  let ownCgroups: string;
  try {
    mountinfo = fs.readFileSync("/proc/self/mountinfo", "utf8");
    ownCgroups = fs.readFileSync("/proc/self/cgroup", "utf8");
  } catch {
    return null;
  }
  const mounts: CgroupMount[] = [];
  for (const line of mountinfo.split("\n")) {
    const [left, right] = line.split(" - ");
    if (!left || !right) continue;
    const fields = left.split(" ");
    const [fsType, , superOptions] = right.split(" ");
    mounts.push({
      root: fields[3] ?? "",
      mountPoint: fields[4] ?? "",
      mountOptions: (fields[5] ?? "").split(","),
      fsType: fsType ?? "",
      superOptions: (superOptions ?? "").split(","),
    });
  }
  return { mounts, ownCgroups };
}

/** `<mount>/<path of the 0:: line>`, or why there is none (no cgroup v2, or outside the mount). */
function ownCgroupV2Directory(): string | { unavailable: string } {
  const read = cgroupMounts();
  if (read === null) return { unavailable: "no /proc/self/mountinfo or /proc/self/cgroup" };
  const ownPath = /^0::(.*)$/m.exec(read.ownCgroups)?.[1];
  if (ownPath === undefined) return { unavailable: "the worker is in no cgroup v2 hierarchy" };
  for (const mount of read.mounts) {
    if (mount.fsType !== "cgroup2") continue;
    const mountRoot = unescapeMountField(mount.root);
    const mountPoint = unescapeMountField(mount.mountPoint);
    if (!mount.mountOptions.includes("rw")) continue;
    // A mount of a sub-tree (a container's view) holds only the cgroups below its root.
    if (mountRoot !== "/" && ownPath !== mountRoot && !ownPath.startsWith(`${mountRoot}/`)) continue;
    return path.join(mountPoint, mountRoot === "/" ? ownPath : ownPath.slice(mountRoot.length));
  }
  return { unavailable: "no writable cgroup v2 mount holds the worker's cgroup" };
}

function unescapeMountField(field: string): string {
  return field.replace(/\\([0-7]{3})/g, (_, octal: string) => String.fromCharCode(parseInt(octal, 8)));
}

/**
 * Removes this PID namespace's `claimwatch-steps-…-<pid>-<start time>` parents whose worker is gone
 * (a SIGKILLed worker whose warden died too; its PID may be another process's now) and any under
 * this process's own PID (a predecessor's: this process has started no step yet). Their step
 * cgroups are killed first.
 */
function removeLeftovers(home: string): void {
  let names: string[];
  try {
    names = fs.readdirSync(home);
  } catch {
    return;
  }
  for (const name of names) {
    if (!name.startsWith(PARENT_PREFIX)) continue;
    const owner = ownerRuns(name.slice(PARENT_PREFIX.length));
    if (!owner || (owner.pid !== process.pid && owner.runs)) continue;
    removeParentNow(path.join(home, name));
  }
}

/** Kills every step cgroup of `parent` and removes them and it (waits at most EMPTY_WAIT_MS in all). */
function removeParentNow(parent: string): void {
  const deadline = performance.now() + EMPTY_WAIT_MS;
  let children: string[];
  try {
    children = fs.readdirSync(parent).filter((name) => isDirectory(path.join(parent, name)));
  } catch {
    return;
  }
  for (const child of children) writeQuietly(path.join(parent, child, "cgroup.kill"), "1");
  for (const child of children) {
    const dir = path.join(parent, child);
    while (isPopulated(dir) && performance.now() < deadline) sleepSync(5);
    rmdirQuietly(dir);
  }
  rmdirQuietly(parent);
}

/** Moves this process back to its home cgroup. Throws only if the kernel refuses (see spawnInside). */
function returnHome(place: StepCgroupPlace): void {
  fs.writeFileSync(path.join(place.home, "cgroup.procs"), String(process.pid));
}

/**
 * The keeper's script (`sh -c STEP_KEEPER claimwatch-step-keeper <parent>`, module comment): waits
 * for the end of its stdin, the worker's pipe, then kills every step cgroup under the parent
 * (`worker-held` too: a dead worker is in none of them). The emptied cgroups are removed by the
 * warden's own end (when it lives) or by the next worker's start (`removeLeftovers`). SIGHUP,
 * SIGINT, SIGTERM and SIGQUIT are ignored: it ends when the worker does. `/bin/sh` with no
 * environment: builtins only.
 */
const STEP_KEEPER = [
  'trap "" HUP INT TERM QUIT',
  "read -r claimwatch_line",
  'for d in "$1"/*/; do [ -e "${d}cgroup.kill" ] && echo 1 > "${d}cgroup.kill"; done',
].join("; ");
const KEEPER_SHELL = "/bin/sh";
/** Keepers are started again at most this often (one that keeps dying must not fork the worker in a loop). */
const KEEPER_RESTART_MS = 1_000;

let keeper: ChildProcess | null = null;
let keeperStartedAt = -Infinity;
let keeperWarned = false;

/** Starts this worker's step keeper for `place` (module comment) unless it runs. */
function ensureKeeper(place: StepCgroupPlace): void {
  if (keeper) return;
  const started = spawnProcess(KEEPER_SHELL, ["-c", STEP_KEEPER, "claimwatch-step-keeper", place.parent], {
    stdio: ["pipe", "ignore", "ignore"],
    detached: true, // a group of its own: a signal to the worker's group does not reach it
    env: {} as NodeJS.ProcessEnv,
  });
  started.on("error", () => {});
  if (started.pid === undefined || !started.stdin) {
    // Tried again at the next step; the warden still ends this worker's steps.
    if (!keeperWarned)
      process.stderr.write(
        `claimwatch-worker: the step keeper (${KEEPER_SHELL}) did not start: a worker killed together with its step warden would leave its steps running\n`,
      );
    keeperWarned = true;
    return;
  }
  keeper = started;
  keeperStartedAt = performance.now();
  started.stdin.on("error", () => {});
  started.unref();
  (started.stdin as unknown as { unref?: () => void }).unref?.();
  started.once("exit", () => {
    if (keeper !== started) return;
    keeper = null;
    const wait = Math.max(0, KEEPER_RESTART_MS - (performance.now() - keeperStartedAt));
    setTimeout(() => ensureKeeper(place), wait).unref();
  });
}

/** One step's cgroup: made by `create`, entered by the program only (`spawnInside`), killed and removed at the step's end. */
export class StepCgroup {
  private constructor(
    readonly place: StepCgroupPlace,
    readonly dir: string,
  ) {}

  private static made = 0;

  /** Makes the step's cgroup (empty; nothing runs in it yet). */
  static create(place: StepCgroupPlace): StepCgroup {
    ensureKeeper(place);
    const dir = path.join(place.parent, `step-${++StepCgroup.made}`);
    fs.mkdirSync(dir);
    return new StepCgroup(place, dir);
  }

  /**
   * Runs `spawn` with this process inside the step's cgroup, so the child is born there, and
   * returns home before anything else can run: all three in this one synchronous call. If the
   * kernel refused the way back, this process would die with the step's `cgroup.kill`: it exits
   * instead (its warden then ends the step), which is the one safe way out of an invariant the
   * kernel broke.
   */
  spawnInside(spawn: () => ChildProcess): ChildProcess {
    fs.writeFileSync(path.join(this.dir, "cgroup.procs"), String(process.pid));
    try {
      return spawn();
    } finally {
      try {
        returnHome(this.place);
      } catch (error) {
        process.stderr.write(
          `claimwatch: cannot leave the step cgroup ${this.dir} (${(error as Error).message}); exiting so that ending the step cannot kill this process\n`,
        );
        process.exit(70);
      }
    }
  }

  /**
   * True when the warden moved this process out of a step's cgroup while it was stopped mid-spawn
   * (module comment): the child may be in `worker-held`. Call after `spawnInside` returned.
   */
  heldByWarden(): boolean {
    return fs.existsSync(path.join(this.place.parent, WORKER_HELD));
  }

  /**
   * Leaves `worker-held` (the warden may have moved this process there just after its own move
   * home), then kills it; `remove` removes it.
   */
  killHeld(): void {
    returnHome(this.place);
    writeQuietly(path.join(this.place.parent, WORKER_HELD, "cgroup.kill"), "1");
  }

  /** SIGKILLs every process in the step's cgroup (never this one: it is home outside `spawnInside`). */
  kill(): void {
    writeQuietly(path.join(this.dir, "cgroup.kill"), "1");
  }

  /** Kills what is left, waits until the cgroup is empty (bounded) and removes it; false if it could not. */
  async remove(): Promise<boolean> {
    this.kill();
    await waitUntilEmpty(this.dir);
    const held = path.join(this.place.parent, WORKER_HELD);
    if (fs.existsSync(held)) {
      this.killHeld();
      await waitUntilEmpty(held);
      rmdirQuietly(held);
    }
    return rmdirQuietly(this.dir);
  }
}

/** Polls `cgroup.events` until `populated 0` (SIGKILLed processes take a moment to exit), at most EMPTY_WAIT_MS. */
async function waitUntilEmpty(dir: string): Promise<void> {
  const deadline = performance.now() + EMPTY_WAIT_MS;
  let pause = 1;
  while (isPopulated(dir) && performance.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, pause));
    pause = Math.min(pause * 2, 50);
  }
}

function isPopulated(dir: string): boolean {
  try {
    return fs.readFileSync(path.join(dir, "cgroup.events"), "utf8").includes("populated 1");
  } catch {
    return false; // removed
  }
}

function isDirectory(file: string): boolean {
  try {
    return fs.statSync(file).isDirectory();
  } catch {
    return false;
  }
}

function writeQuietly(file: string, text: string): void {
  try {
    fs.writeFileSync(file, text);
  } catch {
    // removed already
  }
}

function rmdirQuietly(dir: string): boolean {
  try {
    fs.rmdirSync(dir);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "ENOENT";
  }
}

function sleepSync(ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "EPERM";
  }
}
