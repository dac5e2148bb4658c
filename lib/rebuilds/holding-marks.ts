/**
 * Holding marks: who may be running steps for an output, kept beside it, outside Redis.
 *
 * A claims Redis that loses recent writes (RDB only, AOF `everysec`, a promoted asynchronous
 * replica) can forget a grant while its holder runs: the name looks free, and a second holder
 * would start beside the first until the first's next refresh finds its claim gone. So a holder
 * writes `builds/.holding-fence@<fence>.<token tail>` before its first step and rewrites it (same
 * bytes, in place) after every successful refresh, before that refresh extends its local deadline:
 * the mark's mtime, set by the filesystem's clock, is never older than the last time its holder
 * knew it held the claim. It removes the mark once its steps have stopped. The mark holds how long
 * its holder may run on after its mtime (its claim TTL plus its steps' stop grace), and who it is
 * (process id and start time, pid namespace, boot), so that a holder on the same host whose
 * process has died is not waited for: its steps die with it (the step warden).
 *
 * A new holder writes its own mark first, then looks at the others: a mark whose holder the
 * claims Redis no longer knows (the grant forgotten, or the claim lost while its holder was
 * stopped past its TTL) is waited out until its mtime + its hold (+ `MTIME_SLACK_MS`), measured
 * against the new mark's own mtime, so both times come from one clock (the filesystem's) and
 * host clocks do not matter. A mark of a fence at or above the new grant's says that the claims
 * Redis granted that fence twice: the grant is given up (`ReissuedFenceError`). The fences of the
 * marks also raise every grant (readFenceFloor).
 *
 * On NFS, mounts of the output need `actimeo=0` (or `noac`) for `builds/`: a cached listing can
 * miss a new mark. Attributes are read through an opened handle (close-to-open revalidates them).
 */
import { readFileSync, readlinkSync } from "node:fs";
import fs from "node:fs/promises";
import path from "node:path";
import { ensureBuildsDir, namingFile } from "./output";
import { TransientStepError } from "./steps/context";

const HOLDING_PREFIX = ".holding-fence@";
/** `.holding-fence@<fence>.<token tail>` */
const HOLDING = /^\.holding-fence@([1-9]\d{0,15})\.([A-Za-z0-9]{1,32})$/;
/** Filesystems that keep mtimes in whole seconds (ext3, FAT's two): a mark may look that much older. */
const MTIME_SLACK_MS = 2_000;

export interface HoldingMark {
  readonly fence: number;
  /** Rewrites the mark in place (its mtime is now). Rejects when it cannot (removed, a failing disk). */
  touch(): Promise<void>;
  /** Once the holder's steps have stopped. Never rejects: a mark left behind only costs a wait. */
  remove(): Promise<void>;
}

export interface OtherHolders {
  /** How much longer the longest of them may run on (≤ 0: none may). */
  waitMs: number;
  /** The fences of those waited for, highest first. */
  fences: number[];
  /** The highest fence of any other mark, waited for or not (0: none). */
  highestFence: number;
}

/** What a mark says about its holder. */
interface MarkContent {
  holdMs: number;
  /** The holding process: where it runs (boot id and pid namespace), its pid and start time. */
  boot: string;
  pidns: string;
  pid: number;
  start: string;
}

/** A grant whose fence another holder's mark already carries: the claims Redis granted it twice. */
export class ReissuedFenceError extends TransientStepError {
  constructor(
    readonly fence: number,
    readonly markedFence: number,
  ) {
    super(
      `fence ${fence} was granted while a holder's mark beside the output carries fence ${markedFence} (the claims Redis forgot grants): this grant is given up, the next one is above it`,
    );
    this.name = "ReissuedFenceError";
  }
}

/** The part of a claim token a mark is named by (its random tail: unique per grant). */
export function tokenTail(token: string): string {
  return token.replace(/[^A-Za-z0-9]/g, "").slice(-16) || "0";
}

/** Writes this holder's mark (and `builds/`, if needed). `holdMs`: its TTL plus its steps' stop grace. */
export async function markHolding(
  outputDir: string,
  fence: number,
  token: string,
  holdMs: number,
): Promise<HoldingMark> {
  const buildsDir = await ensureBuildsDir(outputDir);
  const file = path.join(buildsDir, markName(fence, token));
  const content: MarkContent = { holdMs: Math.ceil(holdMs), ...THIS_PROCESS };
  const bytes = JSON.stringify(content);
  await fs.writeFile(file, bytes).catch(async (error: unknown) => {
    // Created but not written (a full disk): not left behind to be waited for.
    await fs.rm(file, { force: true }).catch(() => {});
    throw namingFile(file, error);
  });
  // Set once the holder's steps have stopped: a refresh already under way when the mark is removed
  // touches nothing (it is not an error that the mark is gone then).
  let removed = false;
  return {
    fence,
    // In place ("r+": never created again once removed, never truncated under a reader).
    touch: async () => {
      if (removed) return;
      const handle = await fs.open(file, "r+").catch((error: NodeJS.ErrnoException) => {
        if (removed && error.code === "ENOENT") return null;
        throw error;
      });
      if (handle === null) return;
      try {
        await handle.write(bytes, 0, "utf8").catch((error: unknown) => {
          throw namingFile(file, error);
        });
      } finally {
        await handle.close();
      }
    },
    remove: () => {
      removed = true;
      return fs.rm(file, { force: true }).catch(() => {});
    },
  };
}

/**
 * The other holders' marks for `outputDir`, except those of `knownTokens` (a holder the claims
 * Redis still knows, such as the earlier attempt this grant took over from): how long the longest
 * of them may still run, against `own`'s mark's mtime. A mark that cannot be read counts with
 * `own.holdMs`; one whose holder's process is gone (same host) does not count.
 */
export async function otherHolders(
  outputDir: string,
  own: { fence: number; token: string; holdMs: number },
  knownTokens: string[] = [],
): Promise<OtherHolders> {
  const buildsDir = path.join(outputDir, "builds");
  const ownName = markName(own.fence, own.token);
  const known = new Set(knownTokens.map(tokenTail));
  const listed = await fs.readdir(buildsDir).catch((error: NodeJS.ErrnoException) => {
    if (error.code !== "ENOENT") throw error;
    throw new TransientStepError(`${buildsDir} is gone (with this holder's mark)`, { cause: error });
  });
  const names = listed.filter((name) => {
    const match = HOLDING.exec(name);
    return match !== null && name !== ownName && !known.has(match[2]!);
  });
  if (names.length === 0) return { waitMs: 0, fences: [], highestFence: 0 };
  const ownAt = (await readMark(path.join(buildsDir, ownName)))?.mtimeMs;
  // Removed by a publish of a higher fence's record, or by hand: this grant is behind already.
  if (ownAt === undefined) throw new TransientStepError(`this holder's mark ${ownName} is gone from ${buildsDir}`);
  const result: OtherHolders = { waitMs: 0, fences: [], highestFence: 0 };
  for (const name of names) {
    const fence = Number(HOLDING.exec(name)![1]);
    result.highestFence = Math.max(result.highestFence, fence);
    const file = path.join(buildsDir, name);
    // Unreadable (another user's mark, EIO): its mtime from a stat, which needs no read permission.
    const mark = await readMark(file).catch(async () => {
      const stat = await fs.stat(file).catch(() => null);
      return { mtimeMs: stat?.mtimeMs ?? ownAt, content: null };
    });
    if (mark === null) continue; // removed since the listing: its holder has stopped
    if (mark.content && processGone(mark.content)) continue;
    const holdMs = mark.content?.holdMs ?? own.holdMs;
    const mtimeMs = mark.mtimeMs;
    const left = mtimeMs + holdMs + MTIME_SLACK_MS - ownAt;
    if (left <= 0) continue;
    result.waitMs = Math.max(result.waitMs, Math.ceil(left));
    result.fences.push(fence);
  }
  result.fences.sort((a, b) => b - a);
  return result;
}

/** The fences of the holding marks among `builds/`'s `names`, with their names. */
export function holdingMarksIn(names: string[]): { fence: number; name: string }[] {
  return names.flatMap((name) => {
    const fence = Number(HOLDING.exec(name)?.[1]);
    return Number.isSafeInteger(fence) && fence > 0 ? [{ fence, name }] : [];
  });
}

function markName(fence: number, token: string): string {
  return `${HOLDING_PREFIX}${fence}.${tokenTail(token)}`;
}

/** A mark's mtime and content (null content: not ours to parse); null when it is gone. Other errors reject. */
async function readMark(file: string): Promise<{ mtimeMs: number; content: MarkContent | null } | null> {
  let handle: fs.FileHandle;
  try {
    handle = await fs.open(file, "r");
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return null;
    throw error;
  }
  try {
    const [stat, text] = await Promise.all([handle.stat(), handle.readFile("utf8")]);
    return { mtimeMs: stat.mtimeMs, content: parseContent(text) };
  } finally {
    await handle.close();
  }
}

function parseContent(text: string): MarkContent | null {
  try {
    const value = JSON.parse(text) as Partial<MarkContent>;
    if (typeof value.holdMs !== "number" || !Number.isSafeInteger(value.holdMs) || value.holdMs < 0) return null;
    return {
      holdMs: value.holdMs,
      boot: String(value.boot ?? ""),
      pidns: String(value.pidns ?? ""),
      pid: Number(value.pid ?? 0),
      start: String(value.start ?? ""),
    };
  } catch {
    return null;
  }
}

/**
 * Who this process is, for marks (empty strings where /proc cannot tell: then no reader judges it
 * gone). A /proc of another pid namespace (its pid field is not ours) tells nothing either.
 */
const THIS_PROCESS = {
  boot: readOr("/proc/sys/kernel/random/boot_id"),
  pidns: linkOr("/proc/self/ns/pid"),
  pid: process.pid,
  start: procStat("self")?.pid === process.pid ? (procStat(process.pid)?.start ?? "") : "",
};

/**
 * The mark's holder ran on this host, in this pid namespace, and its process is gone: no such
 * pid (ESRCH), a zombie, or the pid now names a process started at another time. A process that
 * exists but cannot be looked at (hidepid, another user) is not gone.
 */
function processGone(content: MarkContent): boolean {
  if (!content.boot || !content.pidns || !content.start || !Number.isSafeInteger(content.pid) || content.pid <= 0)
    return false;
  if (content.boot !== THIS_PROCESS.boot || content.pidns !== THIS_PROCESS.pidns || !THIS_PROCESS.start) return false;
  try {
    process.kill(content.pid, 0);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ESRCH") return true;
  }
  const stat = procStat(content.pid);
  if (!stat) return false;
  return stat.state === "Z" || stat.start !== content.start;
}

/** From /proc/<pid>/stat: its pid, state and start time (clock ticks after boot, field 22); null when unreadable. */
function procStat(pid: number | "self"): { pid: number; state: string; start: string } | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    // Field 2 (the command) may hold spaces and parentheses: count from the last ")".
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    const start = fields[19];
    return start ? { pid: Number(stat.slice(0, stat.indexOf(" "))), state: fields[0] ?? "", start } : null;
  } catch {
    return null;
  }
}

function readOr(file: string): string {
  try {
    return readFileSync(file, "utf8").trim();
  } catch {
    return "";
  }
}

function linkOr(file: string): string {
  try {
    return readlinkSync(file);
  } catch {
    return "";
  }
}
