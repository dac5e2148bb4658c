/**
 * The mount namespace in which a root worker's `run` steps see published builds read-only
 * (containment.ts, `BuildsShield`). One per worker process, made on its first shielded step:
 *
 *   unshare --mount --propagation slave -- cat      (the holder: stdin is a pipe from the worker)
 *
 * Each output's `builds/` is bind-mounted read-only over itself inside it the first time a step
 * of that output runs (`nsenter … -- mount --bind -o ro`), and again whenever the holder's
 * mount table lacks it (the directory was removed and made again, which detaches the mount, or
 * a root step unmounted it). A step starts as `nsenter --mount=/proc/<holder>/ns/mnt --wd=<cwd>
 * -- <program or containment prefix> …`: nsenter execs in place, so the spawned process becomes
 * the program (cgroup mode) or the namespace's `unshare --pid` — one program start more than an
 * unshielded step, instead of the three (`unshare`, bash, `mount`) of a namespace per step.
 *
 * `slave`: mounts made inside never reach the worker (it writes builds); unmounts on the host
 * still reach the steps. The holder ends when the worker does, however it ends: its stdin
 * reaches end of file. A holder that ended is replaced on the next step, and its mounts made
 * again. Its pid cannot name another process while the worker holds its exit unseen (an
 * unreaped child keeps its pid); the worker forgets it in the same turn Node reaps it.
 */
import { execFile, spawn, type ChildProcess } from "node:child_process";
import fs from "node:fs";
import { promisify } from "node:util";
import { programPath } from "./containment";

const run = promisify(execFile);

/** How long a new holder gets to make its namespace (a loaded host: generous). */
const HOLDER_READY_MS = 10_000;

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

/** The first stderr line of an `nsenter` that could not enter (its exit code is then 1). */
export const NSENTER_FAILED = /^nsenter: (?:cannot open|reassociate to namespace|cannot change directory|setns)/;

interface Holder {
  child: ChildProcess;
  pid: number;
  /** `builds/` directories being mounted now, so two steps of one output mount it once. */
  mounting: Map<string, Promise<void>>;
}

export class BuildsNamespace {
  private holder: Holder | null = null;
  private starting: Promise<Holder> | null = null;

  constructor(
    private readonly programs = {
      unshare: programPath("unshare"),
      nsenter: programPath("nsenter"),
      mount: programPath("mount"),
      cat: programPath("cat"),
    },
  ) {}

  /**
   * The argv to put in front of a step (its program, or its containment's prefix) so it runs in
   * the namespace, in `cwd`, with `buildsDir` read-only. `buildsDir` must exist.
   */
  async enter(builds: string, cwd: string): Promise<string[]> {
    // The mount table names the real path (`mount` resolves symbolic links in it).
    const buildsDir = await fs.promises.realpath(builds);
    const holder = await this.liveHolder();
    if (!(await this.readOnlyIn(holder, buildsDir))) {
      let mounting = holder.mounting.get(buildsDir);
      if (!mounting) {
        mounting = this.mount(holder, buildsDir).finally(() => holder.mounting.delete(buildsDir));
        holder.mounting.set(buildsDir, mounting);
      }
      await mounting;
    }
    if (this.holder !== holder) throw new BuildsNamespaceError("the namespace's holder ended as it was made", false);
    return [this.programs.nsenter, `--mount=/proc/${holder.pid}/ns/mnt`, `--wd=${cwd}`, "--"];
  }

  /** The holder's pid, or null when none runs (tests). */
  get holderPid(): number | null {
    return this.holder?.pid ?? null;
  }

  private async liveHolder(): Promise<Holder> {
    if (this.holder) return this.holder;
    this.starting ??= this.startHolder().finally(() => (this.starting = null));
    return this.starting;
  }

  private async startHolder(): Promise<Holder> {
    const child: ChildProcess = spawn(
      this.programs.unshare,
      ["--mount", "--propagation", "slave", "--", this.programs.cat],
      {
        cwd: "/",
        env: { PATH: process.env.PATH ?? "/usr/bin:/bin" } as unknown as NodeJS.ProcessEnv,
        stdio: ["pipe", "ignore", "ignore"],
      },
    );
    const exited = new Promise<string>((resolve) => {
      child.once("error", (error) => resolve(error.message));
      child.once("exit", (code, signal) => resolve(`it exited ${code ?? signal}`));
    });
    child.unref();
    (child.stdin as unknown as { unref?: () => void } | null)?.unref?.();
    child.stdin?.on("error", () => {}); // EPIPE once it has ended: nothing to do
    if (child.pid === undefined) {
      throw new BuildsNamespaceError(`the namespace for read-only builds was not made: ${await exited}`, false);
    }
    const holder: Holder = { child, pid: child.pid, mounting: new Map() };
    let ended: string | null = null;
    void exited.then((why) => {
      ended = why;
      if (this.holder === holder) this.holder = null;
    });
    // Ready once `cat` runs: unshare has made the namespace and set its propagation (a mount
    // made before that could reach the worker's own view).
    const cat = fs.realpathSync(this.programs.cat);
    const deadline = Date.now() + HOLDER_READY_MS;
    for (;;) {
      if (ended !== null) {
        throw new BuildsNamespaceError(`the namespace for read-only builds was not made: ${ended}`, false);
      }
      let exe = "";
      try {
        exe = fs.readlinkSync(`/proc/${holder.pid}/exe`);
      } catch {
        // not yet, or gone (seen above next turn)
      }
      if (exe === cat) break;
      if (Date.now() > deadline) {
        child.kill("SIGKILL");
        throw new BuildsNamespaceError(
          `the namespace for read-only builds was not made within ${HOLDER_READY_MS} ms`,
          false,
        );
      }
      await new Promise((resolve) => setTimeout(resolve, 2));
    }
    this.holder = holder;
    return holder;
  }

  private async mount(holder: Holder, buildsDir: string): Promise<void> {
    try {
      await run(this.programs.nsenter, [
        `--mount=/proc/${holder.pid}/ns/mnt`,
        "--",
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
      // nsenter's own failure: the holder ended meanwhile (the next step makes a new one).
      throw new BuildsNamespaceError(`cannot mount ${buildsDir} read-only: ${why}`, !NSENTER_FAILED.test(why));
    }
    if (!(await this.readOnlyIn(holder, buildsDir))) {
      throw new BuildsNamespaceError(`cannot mount ${buildsDir} read-only: the mount is not read-only`, true);
    }
  }

  /** Whether the topmost mount at `dir` in the holder's namespace is read-only. */
  private async readOnlyIn(holder: Holder, dir: string): Promise<boolean> {
    let table: string;
    try {
      table = await fs.promises.readFile(`/proc/${holder.pid}/mountinfo`, "utf8");
    } catch {
      return false;
    }
    return topmostMountIsReadOnly(table, dir);
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

/** The worker's namespace for read-only builds (one per process). */
export const buildsNamespace = new BuildsNamespace();
