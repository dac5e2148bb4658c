/**
 * Step containment: every process a `run` step starts ends when the step ends — children,
 * grandchildren, double-forked and `setsid` daemons included — and dies at once with the worker,
 * even when the worker is SIGKILLed or OOM-killed.
 *
 * When the worker dies — however — or stops running for longer than its job lock (blocked,
 * SIGSTOPped), the worker's step warden (warden.ts, one process per worker) kills its steps. A
 * worker killed together with its warden (helper-135) still takes its steps along: in `cgroup`
 * mode the step keeper (step-cgroup.ts), in a PID namespace `setpriv --pdeathsig KILL` before
 * `unshare` (`parentDeathPrefix`).
 * Mechanisms, strongest first (chosen once per worker by `detectContainment`;
 * CLAIMWATCH_STEP_CONTAINMENT names one, and a named one the host lacks is a config error):
 *
 *  - `cgroup`: a cgroup v2 per step (step-cgroup.ts), where the worker's own v2 cgroup is
 *    writable and the kernel has `cgroup.kill` (Linux ≥ 5.14; as root, or with the cgroup
 *    delegated). No init and no shim: the worker enters the step's new cgroup, spawns the program
 *    and returns home in one synchronous turn, so the program is born in the cgroup and nothing it
 *    starts can leave it (setsid and double forks change the session or the parent, not the
 *    cgroup). The program is the worker's own child and not pid 1, so signals mean what they
 *    always do. When it exits, `cgroup.kill` ends the rest (closing the output pipes a daemon
 *    held) and the cgroup is removed once empty. Steps with `memory`/`pids` limits run in the
 *    next mode instead (`forLimitedSteps`: the worker cannot pass through a limited cgroup).
 *    Limits of this mode: a step that deliberately moves its processes to another cgroup (as
 *    root: writing `cgroup.procs`, `systemd-run --scope`, podman/runc/crun) escapes it — a PID
 *    namespace cannot be left that way, so CLAIMWATCH_STEP_CONTAINMENT=pid-namespace is the
 *    choice where steps may do that; the warden's check for a worker stopped mid-spawn,
 *    its move to `worker-held` (step-cgroup.ts) and `cgroup.kill` are separate writes, so a
 *    worker resuming in exactly that instant can die with the step (a dead worker, as far as
 *    the job goes) or stay in `worker-held` until its next spawn; and a worker that is PID 1 (or a child subreaper)
 *    would inherit the step's orphans and never reap them (Node reaps only its own children), so
 *    PID 1 falls back to a PID namespace (`cgroupModeRefusedFor`; a subreaper cannot be detected
 *    from Node and must be configured with CLAIMWATCH_STEP_CONTAINMENT=pid-namespace). A step is
 *    not published while its cgroup cannot be emptied (run-step.ts).
 *  - `pid-namespace`: `unshare [--user --map-root-user] --pid --fork --kill-child -- sh -c INIT …`.
 *    The init is pid 1 of a new PID namespace. Nothing can leave a PID namespace (setsid and
 *    double forks only change the session or the parent), and when its pid 1 exits the kernel
 *    SIGKILLs every process in it and reaps them before pid 1's parent sees the exit. So the step
 *    ends when its program ends, whatever it left behind, and `unshare`'s exit means the
 *    namespace is empty. `--kill-child` ends the namespace if `unshare` itself is killed (the
 *    warden kills the init first anyway). As root
 *    this needs util-linux's `unshare`; as non-root the kernel must allow unprivileged user
 *    namespaces (`--user --map-root-user`).
 *  - `process-group`: the fallback when neither can be made. The step's process group
 *    is SIGKILLed when the program ends and by the warden when the worker dies; a `setsid` daemon
 *    escapes it. The worker says so (Workers page, health banner).
 *
 * SIGTERM goes to the program alone, never to the group (a program must get one SIGTERM, not
 * two): in `cgroup` mode to the program, the spawned process itself; in a namespace the worker
 * sends it to the init's child, the program (the init, pid 1 of the namespace, has no handler, so
 * the kernel keeps every signal but SIGKILL from it); in process-group mode to the init, which
 * passes it on and remembers one that came before the program was forked. SIGKILL is
 * `cgroup.kill` in `cgroup` mode, goes to the init in a namespace (the kernel then ends the rest)
 * and to the whole group otherwise. Exit statuses are a shell's in every mode: 128 + signal for a
 * killed program; a program that cannot be started fails as "not found or not executable".
 *
 * cgroups are used for resource limits (`memory`, `pids` of a step), where a writable memory/pids
 * hierarchy exists (cgroup v1 controllers, or v2 with the controller delegated): each step gets
 * its own cgroup, joined by INIT before the program starts, and removed when the step ends. A step
 * over a limit is found by the cgroup's own counters (`oom_kill`, `pids.events max`). The init
 * counts against a `pids` limit (one process).
 *
 * Cost (`npm run bench:steps`, BENCHMARKS.md): in `cgroup` mode a step is one process creation,
 * as a plain spawn is, plus five small cgroupfs operations (mkdir, two moves of the worker,
 * cgroup.kill, rmdir; the moves take the kernel's cgroup threadgroup lock, the dearest part). In a
 * namespace it is `unshare`, its forked init and the program in the init's foreground — no
 * watcher, no `env` exec (the init sets no trap, so the program starts with every signal at its
 * default, and its foreground child is not a background job, whose SIGINT and SIGQUIT a shell
 * would ignore).
 */
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { cgroupMounts, prepareStepCgroups, type StepCgroupPlace } from "./step-cgroup";

export type ContainmentMode = "cgroup" | "pid-namespace" | "process-group";

const MODES: readonly ContainmentMode[] = ["cgroup", "pid-namespace", "process-group"];

export interface Containment {
  mode: ContainmentMode;
  /** The argv prefix that runs INIT under this containment (before `sh -c INIT …`); none in `cgroup` mode. */
  prefix: string[];
  /** The init script for this mode (`namespaceInit` or `groupInit`); none in `cgroup` mode. */
  init: string;
  /** One line for operators: what is enforced, and what is not. */
  detail: string;
  /** Controllers that can limit a step here (`memory`, `pids`), by the directory steps' cgroups go in. */
  limits: Partial<Record<LimitController, string>>;
  /** `cgroup` mode: where this worker's step cgroups go (step-cgroup.ts). */
  stepCgroups?: StepCgroupPlace;
  /**
   * `cgroup` mode: the containment of steps with `memory`/`pids` limits (the next strongest
   * mode, with INIT joining the limit cgroups). The worker cannot enter a cgroup with a `pids`
   * limit to spawn (its own threads count against it) nor one with a `memory` limit (its threads
   * allocate meanwhile, and the OOM killer would pick the worker), and a limit set after the
   * spawn would not hold from the program's first instruction.
   */
  forLimitedSteps?: Containment;
  /** Whether steps see `builds/` read-only (a mount namespace per worker, root only). */
  builds: BuildsShield;
}

export type LimitController = "memory" | "pids";

/**
 * A step's view of its output's published builds. Write bits (builds are made read-only when
 * promoted) stop a step running as the worker's user from writing into them by mistake; they do
 * not stop root. So a root worker starts each `run` step in a mount namespace (one per worker,
 * builds-namespace.ts) in which `<output>/builds` is bind-mounted read-only: a write into a
 * published build, or through `current`, fails with EROFS. It stops mistakes, not a step set on
 * it: root can remount, mount the filesystem again or reach the worker's view through /proc.
 * `shielded`: this host can make that namespace; else `why` not.
 */
export type BuildsShield = { shielded: true } | { shielded: false; why: string };

/** Printed by INIT (stderr) when it cannot join a step cgroup; it then exits 125. */
export const CGROUP_JOIN_FAILED_LINE = "claimwatch-init: cannot join the step's cgroup";

/**
 * At most two directories (memory, pids), `a` or `a:b`; split without IFS and with one variable
 * named so no step's environment variable is shadowed (the program inherits the init's).
 */
const JOIN_CGROUPS = `for claimwatch_cg in "\${1%%:*}" "\${1#*:}"; do [ -z "$claimwatch_cg" ] || echo 0 > "$claimwatch_cg/cgroup.procs" || { echo "${CGROUP_JOIN_FAILED_LINE} $claimwatch_cg" >&2; exit 125; }; done; unset claimwatch_cg; shift`;

/**
 *   sh -c INIT init <cgroup dirs, ':'-separated, or ''> <program> [args…]
 * The init of a PID namespace: joins the step's cgroups, runs the program in its foreground and
 * exits with its status (128 + signal when it was killed; 127: not found). It sets no trap: as
 * pid 1 of the namespace it gets no signal but SIGKILL anyway (SIGTERM goes to the program), and
 * the program inherits every signal at its default. `exit` after it keeps `sh` from exec'ing the
 * program in its own place (the program must not be pid 1: pid 1 ignores unhandled signals).
 */
export const namespaceInit = [JOIN_CGROUPS, '"$@"', "exit $?"].join("\n");

/**
 *   sh -c INIT init <cgroup dirs, ':'-separated, or ''> <program> [args…]
 * The init of process-group mode (a normal process, not pid 1).
 * Joins the step's cgroups (`0` is "the writing process"), starts the program, passes SIGTERM on
 * to it (also one that came before it was forked), and exits with the program's status (128 +
 * signal when it was killed; 127: program not found). The program's stdin is /dev/null (so is
 * the init's); with `resetSignals` it starts with every signal at its default (a background job
 * of a non-interactive shell would start with SIGINT and SIGQUIT ignored, and the init ignores
 * INT, HUP and QUIT itself): `env --default-signal` (coreutils ≥ 8.31).
 */
export function groupInit(resetSignals: boolean): string {
  return [
    JOIN_CGROUPS,
    "c=; t=",
    'trap \'t=1; [ -n "$c" ] && kill -TERM "$c" 2>/dev/null\' TERM',
    "trap '' INT HUP QUIT",
    `${resetSignals ? "env --default-signal " : ""}"$@" & c=$!`,
    '[ -n "$t" ] && kill -TERM "$c" 2>/dev/null',
    'while :; do wait "$c"; s=$?; kill -0 "$c" 2>/dev/null || exit "$s"; done',
  ].join("\n");
}

const detected = new Map<string, Containment>();

/** A bad CLAIMWATCH_STEP_CONTAINMENT: the worker prints it as one line and exits 2. */
export class ContainmentConfigError extends Error {
  override name = "ContainmentConfigError";
}

/**
 * The strongest containment this host offers, or the one `requested` (CLAIMWATCH_STEP_CONTAINMENT),
 * found once per process and request (a few ms of probes). A requested mode the host cannot
 * offer is a `ContainmentConfigError`, not a silent fallback.
 */
export function detectContainment(
  requested: string = process.env.CLAIMWATCH_STEP_CONTAINMENT || "auto",
  options: { pid?: number } = {},
): Containment {
  const pid = options.pid ?? process.pid;
  const key = `${requested} ${pid}`;
  let found = detected.get(key);
  if (!found) {
    found = detectUncached(requested, pid);
    detected.set(key, found);
  }
  return found;
}

/**
 * Why `cgroup` mode cannot be used by a worker with this PID, or null. A worker that is PID 1 (of
 * a container, or of `unshare --pid`) gets every orphan of its namespace: a step's daemon, killed
 * by `cgroup.kill`, would stay a zombie (Node reaps only the children it spawned). A PID
 * namespace's init reaps its own. The same holds for a worker made a child subreaper
 * (PR_SET_CHILD_SUBREAPER), which Node cannot detect: do not run a worker as one, or set
 * CLAIMWATCH_STEP_CONTAINMENT=pid-namespace.
 */
export function cgroupModeRefusedFor(pid: number): string | null {
  return pid === 1
    ? "the worker is PID 1 and would inherit the step's orphans, which Node never reaps (zombies); a PID namespace's init reaps them"
    : null;
}

/**
 * Throws a `ContainmentConfigError` for a value of CLAIMWATCH_STEP_CONTAINMENT that names no mode,
 * without probing the host: what the launcher checks before it starts anything (whether the host
 * offers the mode is for the worker to find).
 */
export function checkContainmentRequest(requested: string = process.env.CLAIMWATCH_STEP_CONTAINMENT || "auto"): void {
  if (requested !== "auto" && !(MODES as readonly string[]).includes(requested)) {
    throw new ContainmentConfigError(
      `CLAIMWATCH_STEP_CONTAINMENT=${JSON.stringify(requested).slice(0, 80)}: must be auto (the strongest this host offers) or one of ${MODES.join(", ")}`,
    );
  }
}

function detectUncached(forced: string, pid: number): Containment {
  checkContainmentRequest(forced);
  const found = detectMode(forced, pid);
  return { ...found, detail: `${found.detail}${shieldDetail(found)}` };
}

/**
 * What a worker reports of its steps' view of published builds (its heartbeat): `read-only`, or
 * `writable` for a root worker without the shield (limited steps included); none for a non-root one.
 */
export function publishedBuildsToSteps(containment: Containment): "read-only" | "writable" | undefined {
  if (process.getuid?.() !== 0) return undefined;
  const limited = containment.forLimitedSteps ?? containment;
  return containment.builds.shielded && limited.builds.shielded ? "read-only" : "writable";
}

/** What the `step containment:` line adds about published builds (nothing for a non-root worker). */
function shieldDetail(containment: Containment): string {
  const seen = publishedBuildsToSteps(containment);
  if (seen === "read-only") return "; published builds read-only to steps (a mount namespace per worker)";
  if (seen === undefined) return "";
  const why = [containment.builds, containment.forLimitedSteps?.builds].find((b) => b && !b.shielded);
  return `; a root step could write into published builds (${why && !why.shielded ? why.why : "no mount namespace"})`;
}

/**
 * The path of a program the worker starts for its steps, found once on the worker's own PATH (a
 * step's `env` may set another PATH, which must not change what runs around the step); the bare
 * name when it is not found (the probes then fail).
 */
export function programPath(name: string): string {
  const dirs = [
    ...(process.env.PATH ?? "").split(":"),
    "/usr/local/sbin",
    "/usr/local/bin",
    "/usr/sbin",
    "/usr/bin",
    "/sbin",
    "/bin",
  ];
  for (const dir of dirs) {
    if (!dir.startsWith("/")) continue;
    const candidate = path.join(dir, name);
    try {
      fs.accessSync(candidate, fs.constants.X_OK);
      if (fs.statSync(candidate).isFile()) return candidate;
    } catch {
      // not here
    }
  }
  return name;
}

const SHIELD_SCRATCH_PREFIX = "claimwatch-shield-";

/**
 * This process's PID namespace (the inode of /proc/self/ns/pid), so a pid in a scratch
 * directory's name is judged only by processes that see the same pids: a worker in another
 * container sharing /tmp has pids of its own.
 */
function pidNamespaceId(): string {
  try {
    return /\[(\d+)\]/.exec(fs.readlinkSync("/proc/self/ns/pid"))?.[1] ?? "0";
  } catch {
    return "0";
  }
}

/**
 * Removes the probe's scratch directories a worker killed during its probe left behind (kill -9
 * skips `finally`): named `claimwatch-shield-<pid namespace>-<pid>-…`, removed when that pid of
 * this namespace is gone. The bind mount lived in the probe's own mount namespace, gone with it.
 */
function removeScratchOfDeadProbes(namespace: string): void {
  try {
    for (const name of fs.readdirSync(os.tmpdir())) {
      const match = /^claimwatch-shield-(\d+)-(\d+)-/.exec(name);
      const pid = Number(match?.[2]);
      if (!match || match[1] !== namespace || !pid || pid === process.pid || isAlive(pid)) continue;
      fs.rmSync(path.join(os.tmpdir(), name), { recursive: true, force: true });
    }
  } catch {
    // best effort: a leftover scratch directory is untidy, not wrong
  }
}

/**
 * Whether a root worker can give its steps a mount namespace with `builds/` read-only: probed on
 * a scratch directory with the programs steps get (builds-namespace.ts): `unshare --mount`, a
 * read-only bind mount of `<dir>/builds`, `nsenter --wdns` into that namespace in `<dir>/work`,
 * then writes that must fail, by an absolute and by a relative path. Non-root: not needed.
 */
function probeBuildsShield(): BuildsShield {
  if (process.getuid?.() !== 0)
    return { shielded: false, why: "not root: write bits keep steps out of published builds" };
  const probe = [
    '"$2" --bind -o ro -- "$1/builds" "$1/builds" || exit 1',
    'exec "$3" "--mount=/proc/$$/ns/mnt" "--wdns=$1/work" -- "$4" -c \'! touch "$1/builds/a" 2>/dev/null && ! touch ../builds/r 2>/dev/null\' probe "$1"',
  ].join("\n");
  let dir: string | null = null;
  try {
    const namespace = pidNamespaceId();
    removeScratchOfDeadProbes(namespace);
    dir = fs.mkdtempSync(path.join(os.tmpdir(), `${SHIELD_SCRATCH_PREFIX}${namespace}-${process.pid}-`));
    fs.mkdirSync(path.join(dir, "builds"));
    fs.mkdirSync(path.join(dir, "work"));
    const argv = [programPath("unshare"), "--mount", "--propagation", "slave", "--", programPath("sh"), "-c", probe];
    const args = ["probe", dir, programPath("mount"), programPath("nsenter"), programPath("sh")];
    if (works([...argv, ...args]) && fs.readdirSync(path.join(dir, "builds")).length === 0) return { shielded: true };
  } catch {
    // no scratch directory: reported as not shielded
  } finally {
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  }
  return {
    shielded: false,
    why: "no mount namespace with a read-only bind mount can be made here (unshare --mount, mount or nsenter failed)",
  };
}

function detectMode(forced: string, pid: number): Containment {
  const limits = detectLimitControllers();
  const shield = probeBuildsShield();
  const weaker =
    forced === "process-group" ? processGroup(limits, shield, "forced by CLAIMWATCH_STEP_CONTAINMENT") : null;
  if (weaker) return weaker;
  let cgroupUnavailable: string | null = null;
  const refused = cgroupModeRefusedFor(pid);
  if (refused !== null && forced === "cgroup") {
    throw new ContainmentConfigError(`CLAIMWATCH_STEP_CONTAINMENT=cgroup: not usable here: ${refused}`);
  }
  if (refused !== null && forced === "auto") cgroupUnavailable = refused;
  else if (forced === "auto" || forced === "cgroup") {
    const place = prepareStepCgroups();
    if ("unavailable" in place) cgroupUnavailable = place.unavailable;
    else {
      const forLimitedSteps =
        pidNamespace(limits, shield) ?? processGroup(limits, shield, "no PID namespace can be made here");
      return {
        mode: "cgroup",
        prefix: [],
        init: "",
        detail:
          forLimitedSteps.mode === "process-group"
            ? `a cgroup v2 per step, killed with cgroup.kill (${place.parent}); but steps with memory/pids limits get ${forLimitedSteps.detail}`
            : `a cgroup v2 per step, killed with cgroup.kill (${place.parent}); steps with memory/pids limits: ${forLimitedSteps.detail}`,
        limits,
        stepCgroups: place,
        forLimitedSteps,
        builds: shield,
      };
    }
    if (forced === "cgroup") {
      throw new ContainmentConfigError(`CLAIMWATCH_STEP_CONTAINMENT=cgroup: not available here: ${cgroupUnavailable}`);
    }
  }
  const namespace = pidNamespace(limits, shield);
  if (namespace) return withCgroupReason(namespace, cgroupUnavailable);
  if (forced === "pid-namespace") {
    throw new ContainmentConfigError(
      "CLAIMWATCH_STEP_CONTAINMENT=pid-namespace: not available here (unshare failed; as non-root the kernel must allow user namespaces)",
    );
  }
  return withCgroupReason(
    processGroup(
      limits,
      shield,
      "no PID namespace can be made here (unshare failed; as non-root the kernel must allow user namespaces)",
    ),
    cgroupUnavailable,
  );
}

/** Says why the stronger `cgroup` mode is not used, when auto-detection tried it. */
function withCgroupReason(containment: Containment, cgroupUnavailable: string | null): Containment {
  return cgroupUnavailable === null
    ? containment
    : { ...containment, detail: `${containment.detail}; no cgroup per step: ${cgroupUnavailable}` };
}

/**
 * `setpriv --pdeathsig KILL` before `unshare`: the kernel SIGKILLs `unshare` when the worker dies,
 * and `--kill-child` then takes the namespace's init, and the kernel the rest of the namespace —
 * even when the warden died with the worker (`kill -9` of both, `pkill -9 node`), which alone
 * would leave `unshare` and the step running on (helper-135). util-linux has both; without
 * setpriv the warden alone ends a dead worker's steps.
 */
function parentDeathPrefix(): string[] {
  const prefix = [programPath("setpriv"), "--pdeathsig", "KILL", "--"];
  return works([...prefix, "true"]) ? prefix : [];
}

function pidNamespace(limits: Partial<Record<LimitController, string>>, builds: BuildsShield): Containment | null {
  const unshare = programPath("unshare");
  const pdeath = parentDeathPrefix();
  const candidates: { prefix: string[]; detail: string }[] = [
    {
      prefix: [...pdeath, unshare, "--pid", "--fork", "--kill-child", "--"],
      detail: "a PID namespace per step (unshare, root)",
    },
    {
      prefix: [...pdeath, unshare, "--user", "--map-root-user", "--pid", "--fork", "--kill-child", "--"],
      detail: "a PID namespace per step (unshare in a user namespace)",
    },
  ];
  for (const candidate of candidates) {
    if (works([...candidate.prefix, "true"])) {
      return {
        mode: "pid-namespace",
        prefix: candidate.prefix,
        init: namespaceInit,
        detail:
          pdeath.length > 0
            ? candidate.detail
            : `${candidate.detail}; without setpriv, a worker killed together with its step warden leaves its steps running`,
        limits,
        builds,
      };
    }
  }
  return null;
}

function processGroup(
  limits: Partial<Record<LimitController, string>>,
  builds: BuildsShield,
  why: string,
): Containment {
  return {
    mode: "process-group",
    prefix: [],
    init: groupInit(works(["env", "--default-signal", "true"])),
    detail: `process group only (${why}): a setsid daemon can outlive its step`,
    limits,
    builds,
  };
}

function works(argv: string[]): boolean {
  // A generous timeout: on a loaded host a probe that times out would silently weaken containment.
  const result = spawnSync(argv[0]!, argv.slice(1), { stdio: "ignore", timeout: 30_000 });
  return result.status === 0;
}

/**
 * Where a step's cgroup for each controller can be made: the worker's own cgroup in a cgroup v1
 * hierarchy that has the controller, or in the v2 hierarchy when the controller is enabled for
 * its children. Probed by making (and removing) a directory.
 */
function detectLimitControllers(): Partial<Record<LimitController, string>> {
  const found: Partial<Record<LimitController, string>> = {};
  const read = cgroupMounts();
  if (read === null) return found;
  // Mount points as mountinfo writes them (not unescaped).
  const mounts = read.mounts.filter((m) => m.mountPoint !== "");
  const ownPaths = new Map<string, string>();
  for (const line of read.ownCgroups.split("\n")) {
    const match = /^\d+:([^:]*):(.*)$/.exec(line);
    if (!match) continue;
    for (const controller of match[1]!.split(",")) ownPaths.set(controller, match[2]!);
  }
  for (const controller of ["memory", "pids"] as const) {
    const v1 = mounts.find((m) => m.fsType === "cgroup" && m.superOptions.includes(controller));
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
    const steps = base ? path.join(base, "claimwatch-steps") : null;
    if (steps && prepareStepsCgroup(steps, controller, v1 === undefined)) found[controller] = steps;
  }
  return found;
}

/**
 * Makes `<base>/claimwatch-steps` usable for steps' cgroups: on cgroup v2 the controller must be
 * enabled for its children (it holds no process, so that is allowed). Removes the cgroups that
 * steps of dead workers left behind (a SIGKILLed worker cannot remove its own; the PID suffix
 * names the worker). Probed by making (and removing) a directory.
 */
function prepareStepsCgroup(steps: string, controller: LimitController, v2: boolean): boolean {
  const probe = path.join(steps, `probe-${process.pid}`);
  try {
    fs.mkdirSync(probe, { recursive: true });
    fs.rmdirSync(probe);
    if (v2) {
      const enabled = readOr(path.join(steps, "cgroup.subtree_control"), "").split(/\s+/);
      if (!enabled.includes(controller)) fs.writeFileSync(path.join(steps, "cgroup.subtree_control"), `+${controller}`);
    }
  } catch {
    return false;
  }
  for (const name of fs.readdirSync(steps)) {
    const owner = Number(/-(\d+)$/.exec(name)?.[1] ?? NaN);
    if (!Number.isInteger(owner) || isAlive(owner)) continue;
    try {
      fs.rmdirSync(path.join(steps, name)); // only empty ones: a live process keeps its cgroup
    } catch {
      // still populated or already gone
    }
  }
  return true;
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "EPERM";
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
        if (!Object.values(dirs).includes(dir)) fs.mkdirSync(dir); // v2: one cgroup for both
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
      void made.remove();
      throw error;
    }
    return made;
  }

  /** `dir:dir` for INIT's first argument. */
  get joinArgument(): string {
    return [...new Set(Object.values(this.dirs))].join(":");
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

  /**
   * Kills anything still in the cgroups (none is left in a PID namespace) and removes them.
   * Returns the directories it could not remove (processes stuck in uninterruptible I/O).
   */
  async remove(): Promise<string[]> {
    const left: string[] = [];
    for (const dir of Object.values(this.dirs)) {
      let removed = false;
      for (let attempt = 0; attempt < 100 && !removed; attempt++) {
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
          removed = true;
        } catch (error) {
          if ((error as NodeJS.ErrnoException).code === "ENOENT") removed = true;
          // EBUSY: killed processes not reaped yet.
          else await new Promise((resolve) => setTimeout(resolve, 20));
        }
      }
      if (!removed) left.push(dir);
    }
    return left;
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
