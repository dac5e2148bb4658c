/**
 * The mount namespace in which a root worker's `run` steps see published builds read-only
 * (containment.ts, `BuildsShield`). One per worker process at a time, made on its first shielded
 * step:
 *
 *   unshare --mount --propagation slave -- cat      (the holder: stdin is a pipe from the worker)
 *
 * Each output's `builds/` is bind-mounted read-only over itself inside it the first time a step
 * of that output runs (`nsenter … -- mount --bind -o ro`). A step starts as
 * `nsenter --mount=/proc/<worker>/fd/<n> --wdns=<cwd> -- <program or containment prefix> …`:
 * nsenter execs in place, so the spawned process becomes the program (cgroup mode) or the
 * namespace's `unshare --pid` — one program start more than an unshielded step, instead of the
 * three (`unshare`, bash, `mount`) of a namespace per step. `--wdns`: the working directory is
 * looked up inside the namespace (`--wd` would keep one of the worker's view, and `../builds`
 * from it would be writable).
 *
 * The namespace must stay what a fresh one would be: the worker's view, plus the read-only
 * binds. So before every step both mount tables are read, the worker's and the holder's, and
 * compared as sets of mounts (root, mount point, options, filesystem, source; not the ids and
 * peer groups, which differ in a copy), the holder's without its binds: any difference — a step
 * that mounted or unmounted something (it would reach every later step), a mount the worker's
 * view gained or lost that did not propagate (a private root propagates nothing), also while the
 * holder was being made — retires the holder, and a new one is made (its binds again). A bind
 * that is gone (a step unmounted it) is made again. Mount changes that propagate cost nothing.
 * No comparison runs while a bind is being made. A retired holder is killed; steps still in its
 * namespace run on. A step's mount reaches the steps running beside it until the next step
 * starts: the shield stops mistakes, not a step set on changing mounts.
 *
 * The worker keeps the holder's namespace open (`/proc/<worker>/fd/<n>`, closed a minute after
 * the holder is retired), so a holder pid that ended and was reused can never name another
 * namespace. The holder ends when the worker does, however it ends: its stdin reaches end of
 * file.
 */
import { execFile, spawn, type ChildProcess } from "node:child_process";
import fs from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";
import { promisify } from "node:util";
import { programPath } from "./containment";

const run = promisify(execFile);

/** How long a new holder gets to make its namespace (a loaded host: generous). */
const HOLDER_READY_MS = 10_000;
/**
 * Holders made for one step at most (each difference of the mount tables retires one). Where the
 * root mount is private (nothing propagates), every mount or unmount elsewhere on the host is a
 * difference: a burst of them (a disk set up or torn down) is ridden out by waiting a little
 * longer before each holder after the second (`REMAKE_PAUSES_MS`, about 1.5 s in all), so only
 * mounts that keep changing for that long fail the step (a transient failure: it is retried).
 */
const MAX_HOLDERS_PER_STEP = 6;
const REMAKE_PAUSES_MS = [0, 0, 100, 200, 400, 800];

/** What a failed shield says: the step is not started. */
export class BuildsNamespaceError extends Error {
  override name = "BuildsNamespaceError";
  constructor(
    message: string,
    /** `mount` itself refused the bind in a live namespace (no retry helps). */
    readonly mountRefused: boolean,
  ) {
    super(message);
  }
}

/**
 * A step's way into the namespace: the argv to put in front of it, and which holder's it is.
 * Released once the step has ended (or was not started): until then the holder's descriptor
 * stays open, so its number can never name a newer namespace for a step whose nsenter is late.
 */
export interface NamespaceEntry {
  prefix: string[];
  generation: number;
  release(): void;
}

interface Holder {
  child: ChildProcess;
  pid: number;
  generation: number;
  /** The holder's namespace, open in the worker (closed once, a while after the holder ended). */
  fd: number;
  fdClosed: boolean;
  /** Entries handed out and not released: the descriptor stays open while any is. */
  users: number;
  /** `builds/` directories bound read-only in it. */
  mounted: Set<string>;
  /** Its binds, one at a time. */
  mounting: Promise<void>;
  ended: string | null;
}

export class BuildsNamespace {
  private holder: Holder | null = null;
  private starting: Promise<Holder> | null = null;
  private generations = 0;

  constructor(
    private readonly programs = {
      unshare: programPath("unshare"),
      nsenter: programPath("nsenter"),
      mount: programPath("mount"),
      cat: programPath("cat"),
    },
  ) {}

  /**
   * How to start a step in the namespace, in `cwd`, with `builds` read-only (`builds` must
   * exist). The caller spawns in the same turn as it checks `isCurrent` (nothing can retire the
   * holder between).
   */
  async enter(builds: string, cwd: string, signal?: AbortSignal): Promise<NamespaceEntry> {
    // The mount table names the real path (`mount` resolves symbolic links in it).
    const buildsDir = fs.realpathSync(builds);
    const made = new Set<number>();
    const keptChanging = () =>
      new BuildsNamespaceError(
        `the mount tables kept changing: ${MAX_HOLDERS_PER_STEP} namespaces for read-only builds made in turn`,
        false,
      );
    for (;;) {
      signal?.throwIfAborted();
      if (!this.starting && (!this.holder || this.holder.ended !== null)) {
        if (made.size >= MAX_HOLDERS_PER_STEP) throw keptChanging();
        const pause = REMAKE_PAUSES_MS[made.size] ?? 0;
        // None before the first: a step's holder starts in its own turn.
        if (pause > 0) await sleep(pause, undefined, signal ? { signal } : {});
      }
      const holder = await this.liveHolder();
      made.add(holder.generation);
      if (made.size > MAX_HOLDERS_PER_STEP) throw keptChanging(); // one another step made: not retired
      await holder.mounting; // no comparison while a bind is being made
      if (holder.ended !== null) continue;
      if (!this.sameView(holder)) {
        this.retire(holder, "its mounts differ from the worker's");
        continue;
      }
      if (holder.mounted.has(buildsDir)) {
        holder.users += 1;
        let released = false;
        const release = () => {
          if (released) return;
          released = true;
          holder.users -= 1;
          this.closeIfUnused(holder);
        };
        return { prefix: this.prefixOf(holder, `--wdns=${cwd}`), generation: holder.generation, release };
      }
      await this.mountIn(holder, buildsDir); // then compared again
    }
  }

  /** Whether `entry` is still the live holder's: false once it was retired or ended. */
  isCurrent(entry: NamespaceEntry): boolean {
    return this.holder !== null && this.holder.generation === entry.generation && this.holder.ended === null;
  }

  /** Retires the holder of `entry` (a step could not enter it): the next step makes a new one. */
  retireEntry(entry: NamespaceEntry, why: string): void {
    if (this.holder?.generation === entry.generation) this.retire(this.holder, why);
  }

  /** The live holder's pid, or null (tests). */
  get holderPid(): number | null {
    return this.holder?.pid ?? null;
  }

  private prefixOf(holder: Holder, ...options: string[]): string[] {
    return [this.programs.nsenter, `--mount=/proc/${process.pid}/fd/${holder.fd}`, ...options, "--"];
  }

  /**
   * Whether the holder's mounts, without its read-only binds, are the worker's. A bind no longer
   * there (or no longer read-only on top) is forgotten, to be made again. Read synchronously: two
   * small reads of /proc cost less than two trips through the thread pool.
   */
  private sameView(holder: Holder): boolean {
    // A mount that propagates between the two reads is a difference once: read again to be sure.
    return this.sameViewOnce(holder) || this.sameViewOnce(holder);
  }

  private sameViewOnce(holder: Holder): boolean {
    // A bind of a mount namespace's file is never copied into a new namespace (nor propagated).
    const held = mountsOf(readTable(holder.pid)).filter((mount) => !mount.namespaceFile);
    if (held.length === 0) return false; // gone
    for (const dir of holder.mounted) {
      // In place only if writing there fails as a read-only filesystem, seen from inside: a
      // mount over a parent (propagated from the worker's view) would hide the bind.
      const top = held.findLastIndex((mount) => mount.point === dir);
      if (top >= 0 && held[top]!.readOnly && readOnlyInside(holder.pid, dir)) held.splice(top, 1);
      else holder.mounted.delete(dir); // made again, or (hidden: its line stays) the holder retired
    }
    const worker = mountsOf(readTable("self")).filter((mount) => !mount.namespaceFile);
    return sameMounts(held, worker);
  }

  private retire(holder: Holder, why: string): void {
    holder.ended ??= `retired: ${why}`;
    if (this.holder === holder) this.holder = null;
    holder.child.kill("SIGKILL");
    this.closeIfUnused(holder);
  }

  /** Once per holder, when it ended and no entry of it is out (a step's nsenter may be late). */
  private closeIfUnused(holder: Holder): void {
    if (holder.fdClosed || holder.ended === null || holder.users > 0) return;
    holder.fdClosed = true;
    fs.close(holder.fd, () => {});
  }

  private async liveHolder(): Promise<Holder> {
    if (this.holder && this.holder.ended === null) return this.holder;
    this.starting ??= this.startHolder().finally(() => (this.starting = null));
    return this.starting;
  }

  private async startHolder(): Promise<Holder> {
    // Its own environment: nothing of the worker's (a step's marker, a secret) in a long-lived process.
    const env: Record<string, string> = { PATH: process.env.PATH ?? "/usr/bin:/bin" };
    const child: ChildProcess = spawn(
      this.programs.unshare,
      ["--mount", "--propagation", "slave", "--", this.programs.cat],
      {
        cwd: "/",
        env: env as NodeJS.ProcessEnv,
        stdio: ["pipe", "ignore", "ignore"],
      },
    );
    let ended: string | null = null;
    let holder: Holder | null = null;
    // Set in the turn Node reaps it: until then its pid names it and nothing else.
    child.once("error", (error) => (ended ??= error.message));
    child.once("exit", (code, signal) => {
      ended ??= `it exited ${code ?? signal}`;
      if (!holder) return;
      holder.ended ??= ended;
      if (this.holder === holder) this.holder = null;
      this.closeIfUnused(holder);
    });
    child.unref();
    (child.stdin as unknown as { unref?: () => void } | null)?.unref?.();
    child.stdin?.on("error", () => {}); // EPIPE once it has ended: nothing to do
    const pid = child.pid;
    const notMade = (why: string) =>
      new BuildsNamespaceError(`the namespace for read-only builds was not made: ${why}`, false);
    if (pid === undefined) {
      await new Promise((resolve) => setImmediate(resolve));
      throw notMade(ended ?? "no process");
    }
    // Ready once `cat` runs in a namespace of its own whose mounts are no longer shared: unshare
    // has made it and set its propagation (a bind made before that could reach the worker's view).
    const cat = fs.realpathSync(this.programs.cat);
    const own = fs.statSync("/proc/self/ns/mnt").ino;
    const deadline = performance.now() + HOLDER_READY_MS;
    let fd: number;
    for (;;) {
      if (ended !== null) throw notMade(ended);
      try {
        if (
          fs.readlinkSync(`/proc/${pid}/exe`) === cat &&
          fs.statSync(`/proc/${pid}/ns/mnt`).ino !== own &&
          !/ shared:\d+/.test(readTable(pid))
        ) {
          // In this same turn: not reaped (`ended` would be set), so the pid is still the holder's.
          fd = fs.openSync(`/proc/${pid}/ns/mnt`, "r");
          break;
        }
      } catch {
        // not yet, or gone (seen above in a later turn)
      }
      if (performance.now() > deadline) {
        child.kill("SIGKILL");
        throw notMade(`not ready within ${HOLDER_READY_MS} ms`);
      }
      await new Promise((resolve) => setTimeout(resolve, 2));
    }
    holder = {
      child,
      pid,
      generation: ++this.generations,
      fd,
      fdClosed: false,
      users: 0,
      mounted: new Set(),
      mounting: Promise.resolve(),
      ended,
    };
    if (fs.fstatSync(fd).ino === own) {
      this.retire(holder, "its namespace is the worker's own");
      throw notMade("its namespace is the worker's own");
    }
    this.holder = holder;
    return holder;
  }

  /** Binds `buildsDir` read-only in the holder's namespace (one bind at a time per holder). */
  private mountIn(holder: Holder, buildsDir: string): Promise<void> {
    const next = holder.mounting.then(async () => {
      if (holder.mounted.has(buildsDir) || holder.ended !== null) return;
      const argv = [
        ...this.prefixOf(holder).slice(1),
        this.programs.mount,
        "--bind",
        "-o",
        "ro",
        "--",
        buildsDir,
        buildsDir,
      ];
      try {
        await run(this.programs.nsenter, argv);
      } catch (error) {
        const failure = error as { code?: unknown; stderr?: string; message: string };
        const why =
          String(failure.stderr ?? "")
            .trim()
            .split("\n")[0] || failure.message;
        // Refused for good only when `mount` itself answered, in a namespace that still lives;
        // anything else (a holder that ended, nsenter's own failure, no process) is retried.
        // (The view checked again: a mount changed meanwhile is a new namespace's to try.)
        const refused =
          typeof failure.code === "number" &&
          why.startsWith("mount: ") &&
          holder.ended === null &&
          fs.existsSync(buildsDir) &&
          this.sameView(holder);
        if (!refused) this.retire(holder, `a bind failed: ${why}`);
        throw new BuildsNamespaceError(`cannot mount ${buildsDir} read-only: ${why}`, refused);
      }
      if (holder.ended !== null) return; // the next look makes a new holder
      const top = mountsOf(readTable(holder.pid)).findLast((mount) => mount.point === buildsDir);
      if (!top?.readOnly || !readOnlyInside(holder.pid, buildsDir)) {
        this.retire(holder, `${buildsDir} is not read-only after its bind`);
        throw new BuildsNamespaceError(`cannot mount ${buildsDir} read-only: the bind is not read-only on top`, false);
      }
      holder.mounted.add(buildsDir);
    });
    holder.mounting = next.catch(() => {});
    return next;
  }
}

/** A process's mount table, or "" when it cannot be read (gone). */
function readTable(pid: number | "self"): string {
  try {
    return fs.readFileSync(`/proc/${pid}/mountinfo`, "utf8");
  } catch {
    return "";
  }
}

/** Whether `dir`, seen from inside the holder's namespace, refuses writes as a read-only filesystem. */
function readOnlyInside(pid: number, dir: string): boolean {
  try {
    fs.accessSync(`/proc/${pid}/root${dir}`, fs.constants.W_OK);
    return false;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "EROFS";
  }
}

interface Mount {
  point: string;
  readOnly: boolean;
  /** A bind of a mount namespace's file (`nsfs`, root `mnt:[…]`; snapd keeps some). */
  namespaceFile: boolean;
  /** What makes it this mount, in any namespace: root, point, options, filesystem, source, superblock options. */
  key: string;
}

/** The mounts of a mountinfo table, in its order. */
export function mountsOf(mountinfo: string): Mount[] {
  const mounts: Mount[] = [];
  for (const line of mountinfo.split("\n")) {
    const fields = line.split(" ");
    const separator = fields.indexOf("-", 6);
    if (fields.length < 10 || separator < 0) continue;
    const [root, point, options] = [fields[3]!, unescapeMountField(fields[4]!), fields[5]!];
    const [type, source, superOptions] = fields.slice(separator + 1);
    mounts.push({
      point,
      readOnly: options.split(",").includes("ro"),
      namespaceFile: type === "nsfs" && root.startsWith("mnt:["),
      key: [root, fields[4], options, type, source, superOptions].join(" "),
    });
  }
  return mounts;
}

/** The same mounts, each as often (order and ids aside). */
function sameMounts(a: Mount[], b: Mount[]): boolean {
  if (a.length !== b.length) return false;
  const keys = (mounts: Mount[]) => mounts.map((mount) => mount.key).sort();
  const [x, y] = [keys(a), keys(b)];
  return x.every((key, i) => key === y[i]);
}

/** mountinfo writes space, tab, newline and backslash as octal escapes (`\040`). */
function unescapeMountField(field: string): string {
  return field.replace(/\\([0-7]{3})/g, (_, octal: string) => String.fromCharCode(parseInt(octal, 8)));
}

/**
 * The first stderr line of an nsenter that could not enter the worker's namespace for builds, or
 * not find the step's working directory in it (its exit code is then 1, not the program's).
 */
export function nsenterFailed(line: string, cwd: string): boolean {
  const fd = `/proc/${process.pid}/fd/`;
  return (
    line.startsWith(`nsenter: cannot open ${fd}`) ||
    line.startsWith("nsenter: reassociate to namespace 'ns/mnt' failed: ") ||
    line.startsWith("nsenter: cannot open current working directory: ") ||
    line.startsWith(`nsenter: cannot change directory to ${cwd}: `)
  );
}

/** The worker's namespace for read-only builds (one per process). */
export const buildsNamespace = new BuildsNamespace();
