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
 * compared with what they were after the holder's last own change; any difference — a step
 * that mounted or unmounted something (it would reach every later step), a mount the host made
 * or removed since (a private root propagates nothing) — retires the holder, and a new one is
 * made (its binds again). A retired holder is killed; steps still in its namespace run on.
 *
 * The worker keeps the holder's namespace open (`/proc/<worker>/fd/<n>`, closed a minute after
 * the holder is retired), so a holder pid that ended and was reused can never name another
 * namespace. The holder ends when the worker does, however it ends: its stdin reaches end of
 * file.
 */
import { execFile, spawn, type ChildProcess } from "node:child_process";
import fs from "node:fs";
import { promisify } from "node:util";
import { programPath } from "./containment";

const run = promisify(execFile);

/** How long a new holder gets to make its namespace (a loaded host: generous). */
const HOLDER_READY_MS = 10_000;
/** A retired holder's namespace stays open this long (a step's nsenter may still be opening it). */
const RETIRED_FD_KEPT_MS = 60_000;
/** Holders made for one step at most (each change of a mount table retires one). */
const MAX_HOLDERS_PER_STEP = 3;

/** What a failed shield says: the step is not started. */
export class BuildsNamespaceError extends Error {
  override name = "BuildsNamespaceError";
  constructor(
    message: string,
    /** The mount itself was refused (no retry helps), not the namespace's making. */
    readonly mountRefused: boolean,
  ) {
    super(message);
  }
}

/** A step's way into the namespace: the argv to put in front of it, and which holder's it is. */
export interface NamespaceEntry {
  prefix: string[];
  generation: number;
}

interface Holder {
  child: ChildProcess;
  pid: number;
  generation: number;
  /** The holder's namespace, open in the worker. */
  fd: number;
  /** The worker's mount table when the holder was made. */
  workerTable: string;
  /** The holder's mount table after its last own change (a bind). */
  holderTable: string;
  /** `builds/` directories mounted read-only in it. */
  mounted: Set<string>;
  /** Its mounts, one at a time (each re-reads the table after it). */
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
  async enter(builds: string, cwd: string): Promise<NamespaceEntry> {
    // The mount table names the real path (`mount` resolves symbolic links in it).
    const buildsDir = fs.realpathSync(builds);
    for (let made = 0; ; made++) {
      const holder = await this.liveHolder();
      if (holder.mounted.has(buildsDir) && this.unchanged(holder)) {
        return { prefix: this.prefixOf(holder, `--wdns=${cwd}`), generation: holder.generation };
      }
      if (!holder.mounted.has(buildsDir) && this.unchanged(holder)) {
        await this.mountIn(holder, buildsDir);
        continue; // checked again: the table after the mount is the new reference
      }
      this.retire(holder, "a mount table changed");
      if (made + 1 >= MAX_HOLDERS_PER_STEP) {
        throw new BuildsNamespaceError(
          `the mount tables kept changing: ${MAX_HOLDERS_PER_STEP} namespaces for read-only builds made in turn`,
          false,
        );
      }
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
   * Both mount tables as they were after the holder's last own change. Read synchronously: two
   * small reads of /proc (tens of microseconds) cost less than two trips through the thread pool.
   */
  private unchanged(holder: Holder): boolean {
    const worker = readTable("self");
    const held = readTable(holder.pid);
    return holder.ended === null && worker === holder.workerTable && held === holder.holderTable;
  }

  private retire(holder: Holder, why: string): void {
    if (this.holder === holder) this.holder = null;
    holder.ended ??= `retired: ${why}`;
    holder.child.kill("SIGKILL");
    setTimeout(() => fs.close(holder.fd, () => {}), RETIRED_FD_KEPT_MS).unref();
  }

  private async liveHolder(): Promise<Holder> {
    if (this.holder && this.holder.ended === null) return this.holder;
    this.starting ??= this.startHolder().finally(() => (this.starting = null));
    return this.starting;
  }

  private async startHolder(): Promise<Holder> {
    const child: ChildProcess = spawn(
      this.programs.unshare,
      ["--mount", "--propagation", "slave", "--", this.programs.cat],
      {
        cwd: "/",
        stdio: ["pipe", "ignore", "ignore"],
      },
    );
    let ended: string | null = null;
    let holder: Holder | null = null;
    // Set in the turn Node reaps it: until then its pid names it and nothing else.
    child.once("error", (error) => (ended ??= error.message));
    child.once("exit", (code, signal) => {
      ended ??= `it exited ${code ?? signal}`;
      if (holder) holder.ended ??= ended;
      if (holder && this.holder === holder) this.holder = null;
      if (holder) setTimeout(() => fs.close(holder!.fd, () => {}), RETIRED_FD_KEPT_MS).unref();
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
    // Ready once `cat` runs in a namespace of its own: unshare has made it and set its
    // propagation (a mount made before that could reach the worker's own view).
    const cat = fs.realpathSync(this.programs.cat);
    const own = fs.statSync("/proc/self/ns/mnt").ino;
    const deadline = Date.now() + HOLDER_READY_MS;
    for (;;) {
      if (ended !== null) throw notMade(ended);
      let ready = false;
      try {
        ready = fs.readlinkSync(`/proc/${pid}/exe`) === cat && fs.statSync(`/proc/${pid}/ns/mnt`).ino !== own;
      } catch {
        // not yet, or gone (seen above in a later turn)
      }
      if (ready) break;
      if (Date.now() > deadline) {
        child.kill("SIGKILL");
        throw notMade(`not ready within ${HOLDER_READY_MS} ms`);
      }
      await new Promise((resolve) => setTimeout(resolve, 2));
    }
    // In this same turn: not reaped (`ended` would be set), so the pid is still the holder's.
    const fd = fs.openSync(`/proc/${pid}/ns/mnt`, "r");
    if (fs.fstatSync(fd).ino === own) {
      fs.closeSync(fd);
      child.kill("SIGKILL");
      throw notMade("its namespace is the worker's own");
    }
    const workerTable = readTable("self");
    const holderTable = readTable(pid);
    holder = {
      child,
      pid,
      generation: ++this.generations,
      fd,
      workerTable,
      holderTable,
      mounted: new Set(),
      mounting: Promise.resolve(),
      ended,
    };
    if (ended !== null) {
      setTimeout(() => fs.close(fd, () => {}), RETIRED_FD_KEPT_MS).unref();
      throw notMade(ended);
    }
    this.holder = holder;
    return holder;
  }

  /** Mounts `buildsDir` read-only in the holder's namespace (one mount at a time per holder). */
  private mountIn(holder: Holder, buildsDir: string): Promise<void> {
    const next = holder.mounting.then(async () => {
      if (holder.mounted.has(buildsDir) || holder.ended !== null) return;
      try {
        await run(this.programs.nsenter, [
          ...this.prefixOf(holder).slice(1),
          this.programs.mount,
          "--bind",
          "-o",
          "ro",
          "--",
          buildsDir,
          buildsDir,
        ]);
      } catch (error) {
        const stderr = String((error as { stderr?: string }).stderr ?? "").trim();
        const why = stderr.split("\n")[0] || (error as Error).message;
        throw new BuildsNamespaceError(`cannot mount ${buildsDir} read-only: ${why}`, holder.ended === null);
      }
      const held = readTable(holder.pid);
      if (holder.ended !== null) return; // the next look makes a new holder
      if (!topmostMountIsReadOnly(held, buildsDir)) {
        this.retire(holder, `${buildsDir} is not read-only after its mount`);
        throw new BuildsNamespaceError(`cannot mount ${buildsDir} read-only: the mount is not read-only`, true);
      }
      holder.mounted.add(buildsDir);
      holder.holderTable = held;
    });
    holder.mounting = next.catch(() => {});
    return next;
  }
}

/** A process's mount table, or "" when it cannot be read (gone: a difference). */
function readTable(pid: number | "self"): string {
  try {
    return fs.readFileSync(`/proc/${pid}/mountinfo`, "utf8");
  } catch {
    return "";
  }
}

/**
 * Whether, in a `/proc/<pid>/mountinfo` table, the last (topmost) mount whose mount point is `dir`
 * has the `ro` option; false when none is.
 */
export function topmostMountIsReadOnly(mountinfo: string, dir: string): boolean {
  let readOnly: boolean | null = null;
  for (const line of mountinfo.split("\n")) {
    const fields = line.split(" ");
    if (fields.length < 6 || unescapeMountField(fields[4]!) !== dir) continue;
    readOnly = fields[5]!.split(",").includes("ro");
  }
  return readOnly === true;
}

/** mountinfo writes space, tab, newline and backslash as octal escapes (`\040`). */
function unescapeMountField(field: string): string {
  return field.replace(/\\([0-7]{3})/g, (_, octal: string) => String.fromCharCode(parseInt(octal, 8)));
}

/**
 * The first stderr line of an nsenter that could not enter the worker's namespace for builds, or
 * not find the step's working directory in it (its exit code is then 1, not the program's).
 */
export function nsenterFailed(line: string): boolean {
  const fd = `/proc/${process.pid}/fd/`;
  return (
    line.startsWith(`nsenter: cannot open ${fd}`) ||
    line.startsWith("nsenter: reassociate to namespace 'ns/mnt' failed") ||
    line.startsWith("nsenter: cannot open current working directory") ||
    line.startsWith("nsenter: cannot change directory to")
  );
}

/** The worker's namespace for read-only builds (one per process). */
export const buildsNamespace = new BuildsNamespace();
