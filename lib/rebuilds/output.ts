/**
 * Content-addressed builds and the `current` pointer on disk.
 *
 *   <output>/.work/<runId>-f<fence>-<token tail>/   a run's private work directory, one per claim grant
 *   <output>/builds/<hash>/      finished builds, named for the hash of their files
 *   <output>/current -> builds/<hash>   swapped atomically (temp symlink + rename)
 *
 * A repeat of the same inputs produces the same bytes, hence the same path: promoting it again
 * changes nothing. Redis holds the authoritative pointer (fenced publish); the symlink follows it.
 */
import crypto from "node:crypto";
import { createReadStream } from "node:fs";
import fs from "node:fs/promises";
import path from "node:path";
import { holdAfterLastRefreshMs, outputDirOf, tenantsOf, type Definitions } from "./definitions";
import { hostNow } from "../redis/clock";

export const BUILD_HASH = /^[0-9a-f]{32}$/;

/** A run's work directory, `<output>/.work/<name>` (build-and-publish.ts names one per claim grant). */
export function workDirOf(outputDir: string, name: string): string {
  return path.join(outputDir, ".work", name);
}

export function buildDirOf(outputDir: string, hash: string): string {
  return path.join(outputDir, "builds", hash);
}

/** A build holds something that is not a self-contained file tree (see `hashDirectory`). */
export class BuildContentError extends Error {
  override name = "BuildContentError";
}

/**
 * sha256 over every file's relative path, size and bytes, in sorted path order (32 hex chars).
 * A symlink inside the build counts as its path and target text (a build without symlinks hashes
 * as it always did). What the hash cannot vouch for is refused with a BuildContentError: a
 * symlink that leaves the build (absolute, or `..` past its root) would publish bytes that change
 * behind the hash, and FIFOs, sockets and devices have no bytes to hash.
 */
export async function hashDirectory(dir: string): Promise<string> {
  const entries: { rel: string; link: string | null }[] = [];
  async function walk(relative: string): Promise<void> {
    const found = await fs.readdir(path.join(dir, relative), { withFileTypes: true });
    for (const entry of found) {
      const rel = relative ? `${relative}/${entry.name}` : entry.name;
      if (entry.isDirectory()) await walk(rel);
      else if (entry.isFile()) entries.push({ rel, link: null });
      else if (entry.isSymbolicLink()) {
        const target = await fs.readlink(path.join(dir, rel));
        const resolved = path.posix.normalize(path.posix.join(path.posix.dirname(rel), target));
        if (path.posix.isAbsolute(target) || resolved === ".." || resolved.startsWith("../")) {
          throw new BuildContentError(
            `${rel} is a symlink out of the build (-> ${target}); a build must be self-contained`,
          );
        }
        entries.push({ rel, link: target });
      } else {
        throw new BuildContentError(`${rel} is not a file, directory or symlink (a FIFO, socket or device)`);
      }
    }
  }
  await walk("");
  entries.sort((a, b) => (a.rel < b.rel ? -1 : a.rel > b.rel ? 1 : 0));
  const hash = crypto.createHash("sha256");
  for (const { rel, link } of entries) {
    if (link !== null) {
      hash.update(`${rel}\0symlink\0${link}\0`);
      continue;
    }
    const file = path.join(dir, rel);
    // Streamed: a build may hold files larger than a Buffer can (2 GiB) or than memory should.
    hash.update(`${rel}\0${(await fs.stat(file)).size}\0`);
    try {
      for await (const chunk of createReadStream(file)) hash.update(chunk as Buffer);
    } catch (error) {
      throw namingFile(file, error); // a read's EIO names no file
    }
  }
  return hash.digest("hex").slice(0, 32);
}

/**
 * Moves a finished work directory to `builds/<hash>`, read-only and durable: its files and
 * directories lose their write bits and are fsynced before the rename (the top directory loses its
 * write bits right after it: a directory cannot be moved to another parent without write access
 * to itself, and is fsynced then), and `builds/` is fsynced after it. Once this returns, a crash of
 * the machine cannot leave the build's name with missing or empty files behind a pointer that
 * publishes it. Call it only when every process of the run is gone (steps run contained; see
 * steps/containment.ts), so the bytes hashed are the bytes published.
 *
 * If `builds/<hash>` exists already (a repeat, or a concurrent identical run), it is re-hashed and
 * fsynced: the same bytes, on disk → the work directory is dropped. Otherwise it is moved aside
 * and this build, synced already, takes its place: different bytes (someone changed a published
 * build) → `builds/.changed-<hash>-<time>`; a lost write (EIO reading or syncing it: Linux
 * reports a lost write to one fsync only, so a later one would say "on disk" of bytes that are
 * not) → `builds/.unsynced-<hash>-<time>`, unless `current` points at it (then the attempt fails
 * and it stays). Other errors fail the attempt and move nothing. A build this call moved in whose
 * `builds/` entry cannot be synced is moved aside the same way before the error is thrown. Returns the build's path and
 * the paths of builds it moved aside.
 */
/** `<output>/builds`, created if needed: the first one's entry in the output directory synced too. */
export async function ensureBuildsDir(outputDir: string): Promise<string> {
  const buildsDir = path.join(outputDir, "builds");
  if (await makeDirectory(buildsDir)) await syncPath(outputDir);
  return buildsDir;
}

/**
 * `mkdir -p` that reports what really went wrong: Node's recursive mkdir answers ENOENT when it
 * cannot create a missing parent, also when the disk is full (ENOSPC) — which would fail a run
 * for good instead of as transient. True when it created `dir` (or a parent of it).
 */
export async function makeDirectory(dir: string): Promise<boolean> {
  for (let tries = 1; ; tries++) {
    try {
      await fs.mkdir(dir);
      return true;
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      if (code === "EEXIST") {
        // A directory (or a link to one): there already. Something else: EEXIST for the caller.
        // Gone again since (removed meanwhile): asked again, a few times.
        const found = await existingDirectory(dir);
        if (found === "directory") return false;
        if (found === "other" || tries >= 3) throw error;
        continue;
      }
      if (code !== "ENOENT" || path.dirname(dir) === dir || tries >= 3) throw error;
    }
    // A parent is missing: made first (its own real error, if it cannot be).
    await makeDirectory(path.dirname(dir));
  }
}

async function existingDirectory(dir: string): Promise<"directory" | "other" | "gone"> {
  const stat = await fs.stat(dir).catch(() => null);
  if (stat) return stat.isDirectory() ? "directory" : "other";
  // A dangling symlink is something in the way; nothing at all is gone.
  return (await fs.lstat(dir).catch(() => null)) ? "other" : "gone";
}

export async function promoteBuild(
  outputDir: string,
  workDir: string,
  hash: string,
): Promise<{ path: string; changedMovedTo: string | null; unsyncedMovedTo: string | null }> {
  const target = buildDirOf(outputDir, hash);
  const buildsDir = await ensureBuildsDir(outputDir);
  await sealTree(workDir, { includeRoot: false, sync: true });
  const asideOf = (kind: "changed" | "unsynced") =>
    path.join(buildsDir, `.${kind}-${hash}-${Date.now()}-${crypto.randomBytes(3).toString("hex")}`);
  let changedMovedTo: string | null = null;
  let unsyncedMovedTo: string | null = null;
  let movedIn = false;
  for (let attempt = 0; ; attempt++) {
    try {
      await fs.rename(workDir, target);
      movedIn = true;
      break;
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      if ((code !== "ENOTEMPTY" && code !== "EEXIST") || attempt > 0) throw error;
      const found = await examineExisting(target, hash);
      if (found.kind === "whole") {
        await removeTree(workDir);
        break;
      }
      // Gone meanwhile (a concurrent prune): this build takes the name.
      if (found.kind === "gone") continue;
      // The build `current` points at is not moved: its readers would find no build until the
      // next one is in place.
      if (found.kind === "lost-write" && (await readCurrent(outputDir)) === hash) throw found.error;
      const aside = asideOf(found.kind === "changed" ? "changed" : "unsynced");
      // Gone meanwhile (a concurrent prune): nothing to move aside.
      const moved = await fs.rename(target, aside).then(
        () => true,
        (e: unknown) => {
          if ((e as NodeJS.ErrnoException).code !== "ENOENT") throw e;
          return false;
        },
      );
      if (moved && found.kind === "changed") changedMovedTo = aside;
      else if (moved) unsyncedMovedTo = aside;
    }
  }
  await fs.chmod(target, 0o555).catch(() => {});
  // Touch it, so "newest builds" pruning keeps a build that was just re-published. `Date.now` (the
  // Redis clock in a worker: lib/redis/clock), not `new Date()` (the host's): builds published by
  // hosts whose clocks disagree are ordered by when they were published.
  const now = new Date(Date.now());
  await fs.utimes(target, now, now).catch(() => {});
  try {
    await syncPath(target);
    await syncPath(buildsDir);
  } catch (error) {
    // Its name may not be on disk, and a later fsync would not say so: not left for a repeat to
    // trust, unless it took the place of a build moved aside (then it stays: readers need one).
    if (movedIn && !changedMovedTo && !unsyncedMovedTo) await fs.rename(target, asideOf("unsynced")).catch(() => {});
    throw error;
  }
  return { path: target, changedMovedTo, unsyncedMovedTo };
}

/**
 * What a promote finds at an existing `builds/<hash>`: the same bytes, on disk (re-hashed, then
 * fsynced: a promote cut off by a crash between its rename and the sync of builds/, or a build
 * from before builds were synced); changed bytes (or no self-contained tree); a lost write (EIO
 * reading or syncing it); or nothing (pruned meanwhile). Any other error (EACCES, EMFILE) is no
 * evidence against the bytes: thrown, so the attempt fails and nothing moves.
 */
async function examineExisting(
  target: string,
  hash: string,
): Promise<{ kind: "whole" | "changed" | "gone" } | { kind: "lost-write"; error: unknown }> {
  try {
    if ((await hashDirectory(target)) !== hash) return { kind: "changed" };
    await syncTree(target);
    return { kind: "whole" };
  } catch (error) {
    if (error instanceof BuildContentError) return { kind: "changed" };
    const code = (error as NodeJS.ErrnoException).code;
    if (code === "ENOENT") return { kind: "gone" };
    if (code === "EIO") return { kind: "lost-write", error };
    throw error;
  }
}

/**
 * Takes the write bits off everything under `dir` (execute bits stay: a published script still
 * runs). A file with other hard links is copied first, so the seal does not reach, and the build
 * does not share, an inode outside the build. Symlinks are left alone (chmod would follow them).
 * With `sync`, every file and directory is also fsynced (a directory after its entries): the
 * tree's bytes and names are on disk when it resolves.
 */
export async function sealTree(
  dir: string,
  options: { includeRoot: boolean; sync?: boolean } = { includeRoot: true },
): Promise<void> {
  const sync = options.sync ?? false;
  await eachInTree(dir, {
    file: async (full) => {
      const stat = await fs.stat(full);
      if (stat.nlink > 1) {
        const copy = `${full}.cw-unlink-${crypto.randomBytes(3).toString("hex")}`;
        await fs.copyFile(full, copy);
        await fs.chmod(copy, stat.mode & 0o7777);
        await fs.rename(copy, full);
      }
      await fs.chmod(full, stat.mode & 0o7777 & ~0o222);
      if (sync) await syncPath(full);
    },
    directory: async (full, isRoot) => {
      if (!isRoot || options.includeRoot) await fs.chmod(full, (await fs.stat(full)).mode & 0o7777 & ~0o222);
      if (sync) await syncPath(full);
    },
  });
}

/** fsyncs every file and directory under `dir` (a directory after its entries), changing nothing. */
async function syncTree(dir: string): Promise<void> {
  await eachInTree(dir, { file: syncPath, directory: syncPath });
}

/**
 * Visits a tree's regular files and directories, each directory after its entries:
 * subdirectories one after another, files a few at a time (few are open at once).
 */
async function eachInTree(
  dir: string,
  visit: { file: (full: string) => Promise<void>; directory: (full: string, isRoot: boolean) => Promise<void> },
  isRoot = true,
): Promise<void> {
  const entries = await fs.readdir(dir, { withFileTypes: true });
  for (const entry of entries) {
    if (entry.isDirectory()) await eachInTree(path.join(dir, entry.name), visit, false);
  }
  await inPool(
    entries.filter((entry) => entry.isFile()),
    SYNC_BATCH,
    (entry) => visit.file(path.join(dir, entry.name)),
  );
  await visit.directory(dir, isRoot);
}

/**
 * Files visited at once per directory: three of Node's four I/O threads, so an input read or a
 * build elsewhere in the worker still gets one.
 */
const SYNC_BATCH = 3;

/**
 * `each` over `items`, at most `size` at once (a pool: a slow item holds up one lane, not a
 * batch). The first error stops the lanes from taking more items; it is thrown once every lane
 * has settled, so nothing is still writing when the caller cleans up.
 */
async function inPool<T>(items: readonly T[], size: number, each: (item: T) => Promise<unknown>): Promise<void> {
  let next = 0;
  let failure: { error: unknown } | null = null;
  const lane = async () => {
    while (next < items.length && !failure) {
      try {
        await each(items[next++]!);
      } catch (error) {
        failure ??= { error };
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(size, items.length) }, lane));
  if (failure) throw (failure as { error: unknown }).error;
}

/** fsync of a file (its bytes are on disk) or a directory (the names created, renamed or removed in it). */
export async function syncPath(entry: string): Promise<void> {
  const handle = await fs.open(entry, "r");
  try {
    await handle.sync().catch((error: unknown) => {
      throw namingFile(entry, error);
    });
  } finally {
    await handle.close();
  }
}

/**
 * `error` with the file it was about at the end of its message, as Node names the path of a
 * failed `open` — a descriptor's `write` or `fsync` names none ("ENOSPC: no space left on
 * device, write"), and the run's reason must say where the disk failed. The errno code is kept
 * (classify-failure reads it).
 */
export function namingFile(file: string, error: unknown): unknown {
  if (!(error instanceof Error) || error.message.includes(file)) return error;
  const named = new Error(`${error.message} '${file}'`, { cause: error });
  const { code, errno, syscall } = error as NodeJS.ErrnoException;
  return Object.assign(named, { code, errno, syscall, path: file });
}

/**
 * Removes a directory tree, read-only builds included: a non-root owner needs the write bit back
 * on directories (only directories: files are unlinked, never opened, and a hard-linked file's
 * mode is shared with another name).
 */
export async function removeTree(dir: string): Promise<void> {
  try {
    await fs.rm(dir, { recursive: true, force: true });
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code !== "EACCES" && code !== "EPERM") throw error;
    await unsealDirectories(dir).catch(() => {});
    await fs.rm(dir, { recursive: true, force: true });
  }
}

async function unsealDirectories(dir: string): Promise<void> {
  await fs.chmod(dir, 0o700 | ((await fs.stat(dir)).mode & 0o7777));
  for (const entry of await fs.readdir(dir, { withFileTypes: true })) {
    if (entry.isDirectory()) await unsealDirectories(path.join(dir, entry.name));
  }
}

/** What `verifyBuilds` says of a build; `missing`: `current` points at it, and it is not there. */
export interface ChangedBuildBytes {
  path: string;
  expected: string;
  actual: string;
  missing?: true;
}

/** `actual` of a published build that is gone (deleted from under `current`). */
export const MISSING_BUILD = "(missing: current points at it)";

/**
 * Every build of an output whose bytes no longer hash to its name, and the one `current` points at
 * when it is gone. `checked` counts both.
 */
export async function verifyBuilds(
  outputDir: string,
  only?: string,
): Promise<{ checked: number; changed: ChangedBuildBytes[] }> {
  const buildsDir = path.join(outputDir, "builds");
  const changed: ChangedBuildBytes[] = [];
  let names: string[];
  try {
    names = (await fs.readdir(buildsDir)).filter((name) => BUILD_HASH.test(name) && (!only || name === only));
  } catch {
    names = [];
  }
  // The published build itself must be there: deleted from under `current` is not "nothing to check".
  let checked = names.length;
  const current = await readCurrent(outputDir);
  if (current && (!only || only === current) && !names.includes(current)) {
    const dir = path.join(buildsDir, current);
    const there = await fs.lstat(dir).then(
      () => true,
      (error: NodeJS.ErrnoException) => error.code !== "ENOENT" && error.code !== "ENOTDIR",
    );
    if (!there) {
      changed.push({ path: dir, expected: current, actual: MISSING_BUILD, missing: true });
      checked += 1;
    }
  }
  for (const name of names.sort()) {
    const dir = path.join(buildsDir, name);
    const actual = await hashDirectory(dir).catch((error: unknown) => {
      if (error instanceof BuildContentError) return `(${error.message})`;
      throw error;
    });
    if (actual !== name) changed.push({ path: dir, expected: name, actual });
  }
  return { checked, changed };
}

/** The hash `current` points at, or null when there is no (valid) `current`. */
export async function readCurrent(outputDir: string): Promise<string | null> {
  try {
    const target = await fs.readlink(path.join(outputDir, "current"));
    const hash = path.basename(target);
    return BUILD_HASH.test(hash) ? hash : null;
  } catch {
    return null;
  }
}

/**
 * Points `current` at `builds/<hash>` atomically: a reader sees the old build or the new one.
 * Durably: the output directory is fsynced after the swap, so a machine crash does not bring an
 * older `current` back once this returned.
 */
export async function pointCurrent(outputDir: string, hash: string): Promise<void> {
  if (!BUILD_HASH.test(hash)) throw new Error(`not a build hash: ${hash}`);
  const temp = outputTempName(outputDir, ".current-");
  await fs.symlink(path.join("builds", hash), temp).catch((error: unknown) => {
    throw new CurrentSwapError("swap", hash, error);
  });
  try {
    await fs.rename(temp, path.join(outputDir, "current"));
  } catch (error) {
    await fs.rm(temp, { force: true });
    throw new CurrentSwapError("swap", hash, error);
  }
  await syncPath(outputDir).catch((error: unknown) => {
    throw new CurrentSwapError("sync", hash, error);
  });
}

/**
 * `pointCurrent` failed: at the swap (`current` still names what it named) or at the sync after
 * it (`current` names `hash`, but a crash of the host may bring the old link back). The message
 * and errno `code` are the cause's, so callers that log or test them see what they saw before.
 */
export class CurrentSwapError extends Error {
  override name = "CurrentSwapError";
  readonly code: string | undefined;
  constructor(
    readonly stage: "swap" | "sync",
    readonly hash: string,
    cause: unknown,
  ) {
    super(cause instanceof Error ? cause.message : String(cause), { cause });
    this.code = (cause as NodeJS.ErrnoException | undefined)?.code;
  }
}

export interface PruneOptions {
  /** Builds never removed, whatever their age (the Redis pointer's build). */
  protect?: readonly string[];
  /** Called before each removal; throws to stop (the pruner's claim was lost). */
  beforeRemove?: () => void;
}

/**
 * Keeps `current`, the protected builds and the `keep` newest other builds; removes older ones.
 * A build leaves `builds/` by one rename (to `builds/.trash-*`, which no reader resolves), then
 * its tree is removed: the name disappears at once, the slow part holds nothing up.
 */
export async function pruneBuilds(outputDir: string, keep: number, options: PruneOptions = {}): Promise<string[]> {
  const current = await readCurrent(outputDir);
  const protectedNames = new Set([...(options.protect ?? []), ...(current ? [current] : [])]);
  const buildsDir = path.join(outputDir, "builds");
  let names: string[];
  try {
    names = (await fs.readdir(buildsDir)).filter((name) => BUILD_HASH.test(name) && !protectedNames.has(name));
  } catch {
    return [];
  }
  const withTimes = await Promise.all(
    names.map(async (name) => ({
      name,
      // A build removed meanwhile (another worker's prune) sorts as newest: it is not removed again.
      mtime: (await fs.stat(path.join(buildsDir, name)).catch(() => null))?.mtimeMs ?? Infinity,
    })),
  );
  withTimes.sort((a, b) => b.mtime - a.mtime);
  const removed: string[] = [];
  for (const { name } of withTimes.slice(keep)) {
    options.beforeRemove?.();
    // `current` may have been swapped since it was read (a late stale swap): look again.
    if ((await readCurrent(outputDir)) === name) continue;
    const trash = path.join(buildsDir, `.trash-${name}-${crypto.randomBytes(3).toString("hex")}`);
    if (
      await fs.rename(path.join(buildsDir, name), trash).then(
        () => true,
        () => false,
      )
    )
      removed.push(name);
  }
  await removeTrash(buildsDir);
  return removed;
}

/** Removes `builds/.trash-*` (this prune's, and any an interrupted prune left behind). */
async function removeTrash(buildsDir: string): Promise<void> {
  const entries = await fs.readdir(buildsDir).catch(() => [] as string[]);
  for (const name of entries.filter((entry) => entry.startsWith(".trash-"))) {
    // One build that cannot be removed must not stop pruning (or the heartbeat that runs it).
    await removeTree(path.join(buildsDir, name)).catch(() => {});
  }
}

/**
 * What a writer in the output directory names its file before the rename or link that puts it in
 * place (`current`'s symlink, a published-fence entry or the legacy file). Only a writer killed in
 * between leaves one behind; `pruneLeftTemps` removes those.
 */
export type OutputTempPrefix = ".current-" | ".published-fence-writing." | ".claimwatch-claim-writing.";
const OUTPUT_TEMP = /^\.(?:current-|published-fence-writing\.|claimwatch-claim-writing\.)[0-9a-f]{12}$/;

export function outputTempName(outputDir: string, prefix: OutputTempPrefix): string {
  return path.join(outputDir, `${prefix}${crypto.randomBytes(6).toString("hex")}`);
}

/**
 * Removes the temporary files of output writers killed before their rename or link (see
 * `outputTempName`) once older than `ageMs`. A writer paused longer than that finds its file gone
 * and fails (its rename or link answers ENOENT), as a failing disk would have made it.
 */
export async function pruneLeftTemps(outputDir: string, ageMs: number, now = hostNow()): Promise<string[]> {
  const entries = await fs.readdir(outputDir).catch(() => [] as string[]);
  return removeOldTemps(outputDir, entries, ageMs, now);
}

/** `pruneLeftTemps` on a listing of `outputDir` already made. */
async function removeOldTemps(outputDir: string, entries: string[], ageMs: number, now: number): Promise<string[]> {
  const removed: string[] = [];
  for (const name of entries.filter((entry) => OUTPUT_TEMP.test(entry))) {
    const file = path.join(outputDir, name);
    // lstat: `current`'s temporary is a symlink, whose target's age says nothing.
    const stat = await fs.lstat(file).catch(() => null);
    if (!stat || now - stat.mtimeMs <= ageMs) continue;
    if (
      await fs.rm(file, { force: true }).then(
        () => true,
        () => false,
      )
    )
      removed.push(name);
  }
  return removed;
}

/** Removes the work directories in `workRoot` (listed as `entries`) of runs that ended without cleaning up, older than `ageMs`. */
async function removeOldWorkDirs(workRoot: string, entries: string[], ageMs: number, now: number): Promise<void> {
  for (const name of entries) {
    const dir = path.join(workRoot, name);
    const stat = await fs.stat(dir).catch(() => null);
    if (stat && now - stat.mtimeMs > ageMs) await removeTree(dir);
  }
}

/**
 * Work directories of runs, and temporary files of output writers, that a killed worker left
 * behind: removed once older than the rebuild's time limit plus its claim TTL, when no attempt
 * can still be using them (plus a wait for another holder before the first step, as long as a
 * holding mark can ask for, with its slack: build-and-publish.ts). Their age is measured on the
 * clock of the filesystem that stamped them (`filesystemNow`), not this host's: a worker whose
 * clock runs ahead must not take a live run's work dir on shared storage for an abandoned one.
 */
export async function pruneAbandonedWorkDirs(definitions: Definitions): Promise<void> {
  for (const rebuild of definitions.rebuilds.values()) {
    const ageMs = rebuild.timeLimit + rebuild.claim.ttl + holdAfterLastRefreshMs(rebuild) + 5_000;
    for (const tenant of tenantsOf(rebuild)) {
      const outputDir = outputDirOf(rebuild, tenant);
      const workRoot = path.join(outputDir, ".work");
      const [work, top] = await Promise.all([
        fs.readdir(workRoot).catch(() => [] as string[]),
        fs.readdir(outputDir).catch(() => [] as string[]),
      ]);
      // Most passes find nothing to judge: then no clock is read.
      if (work.length === 0 && !top.some((name) => OUTPUT_TEMP.test(name))) continue;
      const now = await filesystemNow(outputDir);
      if (now === null) continue; // no clock file there (a read-only disk, no such dir): next pass
      await removeOldWorkDirs(workRoot, work, ageMs, now);
      await removeOldTemps(outputDir, top, ageMs, now);
    }
  }
}

/** The empty file in each output dir whose mtime `filesystemNow` sets: kept, one per output. */
const CLOCK_FILE = ".clock";

/**
 * Now, on the clock of the filesystem holding `dir`: the mtime `ftruncate` gives the empty
 * `.clock` file there (on NFS the server sets it, with the clock that stamped the other hosts'
 * files too). Truncating allocates nothing, so it works on a full disk; only the first call per
 * output creates the file. Null when it cannot be opened or created (a read-only disk).
 */
export async function filesystemNow(dir: string): Promise<number | null> {
  const file = path.join(dir, CLOCK_FILE);
  let handle: fs.FileHandle;
  try {
    handle = await fs.open(file, "r+").catch((error: NodeJS.ErrnoException) => {
      if (error.code === "ENOENT") return fs.open(file, "a");
      throw error;
    });
  } catch {
    return null;
  }
  try {
    await handle.truncate(0);
    return (await handle.stat()).mtimeMs;
  } catch {
    return null;
  } finally {
    await handle.close().catch(() => {});
  }
}
