/**
 * Step containment: every process a `run` step starts ends when the step ends — children,
 * grandchildren, double-forked and `setsid` daemons included — and dies at once with the worker,
 * even when the worker is SIGKILLed or OOM-killed.
 *
 * Mechanisms, strongest first (chosen once per worker by `detectContainment`):
 *
 *  - `pid-namespace`: each step runs as
 *      unshare [--user --map-root-user] --pid --fork --kill-child -- sh -c NAMESPACE_INIT …
 *    `INIT` is pid 1 of a new PID namespace and the step's program its only child. Nothing can
 *    leave a PID namespace (setsid and double forks only change the session or the parent), and
 *    when its pid 1 exits the kernel SIGKILLs every process in it and reaps them before pid 1's
 *    parent sees the exit. So the step ends when its program ends, whatever it left behind.
 *    The worker's death reaches the namespace through a pipe only the worker can write: INIT
 *    reads EOF on it and exits (a parent-death signal would cost one more exec, setpriv, per
 *    step); `--kill-child` ends the namespace if `unshare` itself is killed.
 *    As root this needs util-linux's `unshare`; as non-root the kernel must allow unprivileged
 *    user namespaces (`--user --map-root-user`).
 *  - `process-group`: the fallback when no PID namespace can be made. The step's process group
 *    is signalled on abort and SIGKILLed when the program ends, and setpriv's parent-death signal
 *    (`setpriv --pdeathsig KILL`, util-linux) still stops the program with the worker. A `setsid` daemon escapes this: the worker says so
 *    (Workers page, health banner).
 *
 * cgroups are used for resource limits (`memory`, `pids` of a step), where a writable memory/pids
 * hierarchy exists (cgroup v1 controllers, or v2 with the controller delegated): each step gets
 * its own cgroup, joined by INIT before the program starts, and removed when the step ends. A step
 * over a limit is found by the cgroup's own counters (`oom_kill`, `pids.events max`).
 */
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";

export type ContainmentMode = "pid-namespace" | "process-group";

export interface Containment {
  mode: ContainmentMode;
  /** The argv prefix that runs INIT under this containment (before `sh -c INIT …`). */
  prefix: string[];
  /** One line for operators: what is enforced, and what is not. */
  detail: string;
  /** Controllers that can limit a step here (`memory`, `pids`), by the directory steps' cgroups go in. */
  limits: Partial<Record<LimitController, string>>;
}

export type LimitController = "memory" | "pids";

const JOIN_CGROUPS = 'cg=$1; shift; IFS=:; for d in $cg; do echo 0 > "$d/cgroup.procs" || exit 125; done; unset IFS';

/**
 * pid 1 of a step's PID namespace:
 *   sh -c NAMESPACE_INIT init <cgroup dirs, ':'-separated, or ''> <program> [args…]
 * Joins the step's cgroups (`0` is "the writing process"), runs the program as its only child,
 * passes SIGTERM/SIGINT on to it (pid 1 of a namespace gets no signal it has no handler for), and
 * exits with the program's status (128 + signal when it was killed). 127: program not found.
 * Its stdin is a pipe whose write end only the worker holds: a watcher reads it, and when the
 * worker dies (however: SIGKILL, OOM) it reads EOF and tells pid 1 to end the namespace (USR1).
 * The program's stdin is /dev/null.
 */
export const NAMESPACE_INIT = [
  JOIN_CGROUPS,
  "trap 'exit 137' USR1",
  "trap 'kill -TERM \"$c\" 2>/dev/null' TERM",
  "trap 'kill -INT \"$c\" 2>/dev/null' INT",
  "exec 3<&0 </dev/null",
  "(read _ ; kill -USR1 1) <&3 3<&- &",
  '"$@" 3<&- & c=$!',
  "exec 3<&-",
  'while :; do wait "$c"; s=$?; kill -0 "$c" 2>/dev/null || exit "$s"; done',
].join("\n");

/**
 * The same for process-group mode: joins the cgroups, then becomes the program (`exec` keeps
 * setpriv's parent-death signal on it). 127: program not found.
 */
export const GROUP_INIT = `${JOIN_CGROUPS}\nexec "$@"`;

export function stepInit(mode: ContainmentMode): string {
  return mode === "pid-namespace" ? NAMESPACE_INIT : GROUP_INIT;
}

/** INIT's exit code when a step cgroup cannot be joined. */
export const CGROUP_JOIN_FAILED = 125;

let detected: Containment | null = null;

/** A bad CLAIMWATCH_STEP_CONTAINMENT: the worker prints it as one line and exits 2. */
export class ContainmentConfigError extends Error {
  override name = "ContainmentConfigError";
}

/** The strongest containment this host offers, found once per process (a few ms of probes). */
export function detectContainment(): Containment {
  if (detected) return detected;
  const forced = process.env.CLAIMWATCH_STEP_CONTAINMENT || "auto";
  if (forced !== "auto" && forced !== "process-group") {
    throw new ContainmentConfigError(
      `CLAIMWATCH_STEP_CONTAINMENT=${JSON.stringify(forced).slice(0, 80)}: must be auto (the strongest this host offers) or process-group`,
    );
  }
  const limits = detectLimitControllers();
  const setpriv = works(["setpriv", "--pdeathsig", "KILL", "--", "true"])
    ? ["setpriv", "--pdeathsig", "KILL", "--"]
    : [];
  const candidates: { prefix: string[]; detail: string }[] =
    forced === "process-group"
      ? []
      : [
          {
            prefix: ["unshare", "--pid", "--fork", "--kill-child", "--"],
            detail: "a PID namespace per step (unshare, root)",
          },
          {
            prefix: ["unshare", "--user", "--map-root-user", "--pid", "--fork", "--kill-child", "--"],
            detail: "a PID namespace per step (unshare in a user namespace)",
          },
        ];
  for (const candidate of candidates) {
    if (works([...candidate.prefix, "true"])) {
      detected = { mode: "pid-namespace", prefix: candidate.prefix, detail: candidate.detail, limits };
      return detected;
    }
  }
  const why =
    forced === "process-group"
      ? "forced by CLAIMWATCH_STEP_CONTAINMENT"
      : `no PID namespace can be made here (unshare failed; as non-root the kernel must allow user namespaces)${
          setpriv.length === 0 ? "; setpriv is missing too, so a killed worker's step lives on" : ""
        }`;
  detected = {
    mode: "process-group",
    prefix: setpriv,
    detail: `process group only (${why}): a setsid daemon can outlive its step`,
    limits,
  };
  return detected;
}

function works(argv: string[]): boolean {
  const result = spawnSync(argv[0]!, argv.slice(1), { stdio: "ignore", timeout: 5_000 });
  return result.status === 0;
}

/**
 * Where a step's cgroup for each controller can be made: the worker's own cgroup in a cgroup v1
 * hierarchy that has the controller, or in the v2 hierarchy when the controller is enabled for
 * its children. Probed by making (and removing) a directory.
 */
function detectLimitControllers(): Partial<Record<LimitController, string>> {
  const found: Partial<Record<LimitController, string>> = {};
  let mountinfo: string;
  let own: string;
  try {
    mountinfo = fs.readFileSync("/proc/self/mountinfo", "utf8");
    own = fs.readFileSync("/proc/self/cgroup", "utf8");
  } catch {
    return found;
  }
  const mounts = mountinfo
    .split("\n")
    .map((line) => {
      const [left, right] = line.split(" - ");
      if (!left || !right) return null;
      const mountPoint = left.split(" ")[4];
      const [fsType, , superOptions] = right.split(" ");
      return mountPoint ? { mountPoint, fsType, options: (superOptions ?? "").split(",") } : null;
    })
    .filter((m) => m !== null);
  const ownPaths = new Map<string, string>();
  for (const line of own.split("\n")) {
    const match = /^\d+:([^:]*):(.*)$/.exec(line);
    if (!match) continue;
    for (const controller of match[1]!.split(",")) ownPaths.set(controller, match[2]!);
  }
  for (const controller of ["memory", "pids"] as const) {
    const v1 = mounts.find((m) => m.fsType === "cgroup" && m.options.includes(controller));
    let base: string | null = null;
    if (v1 && ownPaths.has(controller)) base = path.join(v1.mountPoint, ownPaths.get(controller)!);
    else {
      const v2 = mounts.find((m) => m.fsType === "cgroup2");
      const ownV2 = ownPaths.get("");
      if (v2 && ownV2 !== undefined) {
        const dir = path.join(v2.mountPoint, ownV2);
        const enabled = readOr(path.join(dir, "cgroup.subtree_control"), "").split(/\s+/);
        if (enabled.includes(controller)) base = dir;
      }
    }
    if (base && canMakeChild(base)) found[controller] = path.join(base, "claimwatch-steps");
  }
  return found;
}

function canMakeChild(base: string): boolean {
  const probe = path.join(base, "claimwatch-steps", `probe-${process.pid}`);
  try {
    fs.mkdirSync(probe, { recursive: true });
    fs.rmdirSync(probe);
    return true;
  } catch {
    return false;
  }
}

function readOr(file: string, fallback: string): string {
  try {
    return fs.readFileSync(file, "utf8");
  } catch {
    return fallback;
  }
}

export interface StepLimits {
  /** Bytes of memory (RSS + page cache, as the cgroup counts it). */
  memory?: number;
  /** Processes and threads at once. */
  pids?: number;
}

/** A step's own cgroups, with its limits written; `remove()` when the step has ended. */
export class StepCgroups {
  private constructor(
    private readonly dirs: Partial<Record<LimitController, string>>,
    private readonly limits: StepLimits,
  ) {}

  /**
   * Makes the cgroups for `limits`. A limit this host cannot enforce is an error naming it:
   * a step that asked for a limit must not run without it.
   */
  static create(containment: Containment, stepId: string, limits: StepLimits): StepCgroups {
    const dirs: Partial<Record<LimitController, string>> = {};
    const made = new StepCgroups(dirs, limits);
    try {
      for (const controller of ["memory", "pids"] as const) {
        const value = limits[controller];
        if (value === undefined) continue;
        const base = containment.limits[controller];
        if (!base) {
          throw new Error(
            `a ${controller} limit cannot be enforced on this host (no writable cgroup with the ${controller} controller)`,
          );
        }
        const dir = path.join(base, stepId);
        fs.mkdirSync(dir, { recursive: true });
        dirs[controller] = dir;
        if (controller === "pids") fs.writeFileSync(path.join(dir, "pids.max"), String(value));
        else if (fs.existsSync(path.join(dir, "memory.max"))) {
          fs.writeFileSync(path.join(dir, "memory.max"), String(value));
          if (fs.existsSync(path.join(dir, "memory.swap.max")))
            fs.writeFileSync(path.join(dir, "memory.swap.max"), "0");
        } else {
          fs.writeFileSync(path.join(dir, "memory.limit_in_bytes"), String(value));
          // Best effort: without swap accounting the limit holds RAM only.
          try {
            fs.writeFileSync(path.join(dir, "memory.memsw.limit_in_bytes"), String(value));
          } catch {
            // no swap accounting here
          }
        }
      }
    } catch (error) {
      made.remove();
      throw error;
    }
    return made;
  }

  /** `dir:dir` for INIT's first argument. */
  get joinArgument(): string {
    return Object.values(this.dirs).join(":");
  }

  /** Why the step failed, when one of its cgroups says it hit its limit; else null. */
  limitHit(): string | null {
    const memoryDir = this.dirs.memory;
    if (memoryDir) {
      const events =
        readOr(path.join(memoryDir, "memory.events"), "") || readOr(path.join(memoryDir, "memory.oom_control"), "");
      const kills = Number(/oom_kill (\d+)/.exec(events)?.[1] ?? 0);
      if (kills > 0) {
        return `exceeded its memory limit of ${formatBytes(this.limits.memory!)} (${kills} process${kills === 1 ? "" : "es"} killed by the kernel's OOM killer)`;
      }
    }
    const pidsDir = this.dirs.pids;
    if (pidsDir) {
      const refused = Number(/max (\d+)/.exec(readOr(path.join(pidsDir, "pids.events"), ""))?.[1] ?? 0);
      if (refused > 0)
        return `hit its limit of ${this.limits.pids} processes (${refused} fork${refused === 1 ? "" : "s"} refused)`;
    }
    return null;
  }

  /** Kills anything still in the cgroups (none is left in a PID namespace) and removes them. */
  remove(): void {
    for (const dir of Object.values(this.dirs)) {
      for (let attempt = 0; attempt < 50; attempt++) {
        const pids = readOr(path.join(dir, "cgroup.procs"), "").split("\n").filter(Boolean);
        for (const pid of pids) {
          try {
            process.kill(Number(pid), "SIGKILL");
          } catch {
            // gone already
          }
        }
        try {
          fs.rmdirSync(dir);
          break;
        } catch (error) {
          const code = (error as NodeJS.ErrnoException).code;
          if (code === "ENOENT") break;
          // EBUSY: killed processes not reaped yet; a short synchronous pause, bounded.
          Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 10);
        }
      }
    }
  }
}

export function formatBytes(bytes: number): string {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1 && value % 1024 === 0) {
    value /= 1024;
    unit += 1;
  }
  return `${value} ${units[unit]}`;
}
