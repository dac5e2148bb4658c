/**
 * Versions and idempotency keys. A rebuild's version is the trigger's, else the content hash of
 * its inputs; the idempotency key is sha256(`rebuild:tenant:version`): same inputs, same key.
 */
import crypto from "node:crypto";
import fs from "node:fs";
import fsp from "node:fs/promises";
import path from "node:path";
import { StepFailedError, TransientStepError } from "./steps/context";
import { TRANSIENT_ERRNO } from "./steps/run-step";
import { hostNow } from "../redis/clock";

/**
 * Input hashes already computed, keyed by the input paths and trusted while every file's
 * (dev, inode, size, mtime, ctime) is unchanged — ctime moves on any write and cannot be set
 * back by a user — and only for files untouched for `settleMs` before they were hashed, so a
 * write within one timestamp tick of the hash is never missed ("racy" files are re-read).
 * For answers that may be a little stale — the "Rebuild now" preview, polled every 2 s — not for
 * the worker's version: on NFS, stat can serve cached attributes for up to a minute, and a
 * version taken from a stale stat would skip a rebuild as already done. The worker reads.
 */
export class InputHashCache {
  hits = 0;
  misses = 0;
  private readonly entries = new Map<string, { fingerprint: string; hash: string }>();

  constructor(
    private readonly maxEntries = 256,
    private readonly settleMs = 2_000,
  ) {}

  /** The cached hash of `paths` if their files are unchanged, else null. */
  lookup(key: string, fingerprint: string): string | null {
    const entry = this.entries.get(key);
    if (entry && entry.fingerprint === fingerprint) {
      this.hits += 1;
      return entry.hash;
    }
    this.misses += 1;
    return null;
  }

  /**
   * `read()` for `key`, unless one for the same inputs is still going: then that one's result
   * (a little stale, as every answer of this cache may be). A read stuck in a system call (a hung
   * mount) then holds one thread of the pool, not one per poll of the preview.
   */
  readOnce(key: string, read: () => Promise<string>): Promise<string> {
    let reading = this.reading.get(key);
    if (!reading) {
      reading = read().finally(() => this.reading.delete(key));
      this.reading.set(key, reading);
    }
    return reading;
  }

  private readonly reading = new Map<string, Promise<string>>();

  store(key: string, fingerprint: string, hash: string, newestChangeMs: number, now = hostNow()): void {
    // Against file times this host stamped: its own clock, not the Redis clock (lib/redis/clock.ts).
    if (now - newestChangeMs <= this.settleMs) return;
    this.entries.delete(key); // an update moves to the newest end (and evicts nothing)
    if (this.entries.size >= this.maxEntries) this.entries.delete(this.entries.keys().next().value!);
    this.entries.set(key, { fingerprint, hash });
  }
}

export interface HashInputsOptions {
  /** Serve the hash from here while the files are unchanged (InputHashCache). */
  cache?: InputHashCache;
  /**
   * Stops the reading when aborted (an operator's cancel, a shutdown, a caller's time limit): the
   * promise rejects at once with the signal's abort error, never with an input error. Large
   * inputs, or one that never ends (a FIFO, a hung network mount), would otherwise hold the
   * caller until they are read. A system call that blocks (opening a FIFO nobody writes to, a
   * stat on a hung mount) cannot be interrupted: it is left to finish in the background.
   */
  signal?: AbortSignal;
}

/** sha256 over each input's name and bytes, in the order the definition lists them. */
export function hashInputs(inputPaths: readonly string[], options: HashInputsOptions = {}): Promise<string> {
  const { cache, signal } = options;
  if (signal?.aborted) return Promise.reject(stoppedBy(signal));
  if (abandoned.size >= MAX_ABANDONED_READS) {
    // Each may hold a thread of the pool for good: keep the rest for everything else.
    return Promise.reject(
      new TransientStepError(
        `${abandoned.size} earlier reads of inputs are still stuck in the kernel (a hung mount?); not reading more`,
      ),
    );
  }
  // With a cache, one look (stat, cache, read) per set of inputs at a time, shared by the callers
  // that ask meanwhile: no one caller's signal stops it (they stop waiting for it instead).
  const work = cache
    ? cache.readOnce(inputPaths.join("\0"), () => hashThroughCache(inputPaths, cache))
    : readAndHash(inputPaths, signal);
  if (!signal) return work;
  let settled = false;
  void work.then(
    () => (settled = true),
    () => (settled = true),
  );
  let onAbort = () => {};
  const stopped = new Promise<never>((_, reject) => {
    onAbort = () => {
      if (!settled) abandon(work);
      reject(stoppedBy(signal));
    };
    signal.addEventListener("abort", onAbort, { once: true });
  });
  return Promise.race([work, stopped]).finally(() => signal.removeEventListener("abort", onAbort));
}

/** Reads a caller stopped waiting for, until they end (a stuck one never does). */
const abandoned = new Set<Promise<string>>();
/** Abandoned reads at which no new read starts: Node's thread pool has 4 threads. */
export const MAX_ABANDONED_READS = 2;

function abandon(work: Promise<string>): void {
  if (abandoned.has(work)) return;
  abandoned.add(work);
  endStuckProcessesOnExit();
  void work.catch(() => {}).finally(() => abandoned.delete(work));
}

/**
 * Input reads stopped by their signal that have not ended yet: each may hold a thread of the
 * thread pool in a system call that never returns (opening a FIFO nobody writes to, a stat on
 * a hung mount). Node's `process.exit` waits for those threads, so a process with any cannot exit
 * normally: it ends with SIGKILL then (`endStuckProcessesOnExit`).
 */
export function abandonedInputReads(): number {
  return abandoned.size;
}

let exitHooked = false;
/**
 * Once a read was left behind: a process that exits while any is still stuck ends with SIGKILL
 * instead of hanging in `process.exit` (the worker, and the web server after a preview). Exit
 * listeners added after this one do not run then (the step cgroups' is added at start, before
 * it; the worker's stop adds its own SIGKILL listener last), and a supervisor sees the exit as
 * killed.
 */
function endStuckProcessesOnExit(): void {
  if (exitHooked) return;
  exitHooked = true;
  process.once("exit", () => {
    if (abandoned.size > 0) process.kill(process.pid, "SIGKILL");
  });
}

/** The hash from `cache` while the files are unchanged, else read and filed under the fingerprint taken before the read. */
async function hashThroughCache(inputPaths: readonly string[], cache: InputHashCache): Promise<string> {
  // One at a time: a stat stuck on a hung mount then holds one thread of the pool, not one per input.
  const present: fs.Stats[] = [];
  for (const file of inputPaths) {
    const stat = await fsp.stat(file).catch(() => null);
    if (!stat) return readAndHash(inputPaths); // reports which input
    present.push(stat);
  }
  const key = inputPaths.join("\0");
  const fingerprint = present.map((s) => `${s.dev}:${s.ino}:${s.size}:${s.mtimeMs}:${s.ctimeMs}`).join("|");
  const cached = cache.lookup(key, fingerprint);
  if (cached) return cached;
  const hash = await readAndHash(inputPaths);
  cache.store(key, fingerprint, hash, Math.max(0, ...present.map((s) => Math.max(s.mtimeMs, s.ctimeMs))));
  return hash;
}

async function readAndHash(inputPaths: readonly string[], signal?: AbortSignal): Promise<string> {
  const hash = crypto.createHash("sha256");
  for (const file of inputPaths) {
    hash.update(`${path.basename(file)}\0`);
    try {
      if (signal?.aborted) throw stoppedBy(signal);
      const before = await fsp.stat(file);
      // A stream made with an aborted signal still opens the file and never closes it.
      if (signal?.aborted) throw stoppedBy(signal);
      for await (const chunk of fs.createReadStream(file, signal ? { signal } : {})) hash.update(chunk as Buffer);
      const after = await fsp.stat(file);
      if (identityOf(before) !== identityOf(after)) {
        // Replaced or written while read: the hash mixes two versions. Read it again later.
        throw new TransientStepError(`input ${file} changed while it was read`);
      }
    } catch (error) {
      if (error instanceof TransientStepError) throw error;
      if (signal?.aborted) throw stoppedBy(signal, error); // stopped, not unreadable
      const code = (error as NodeJS.ErrnoException).code;
      const message = `input ${file} cannot be read: ${code ?? error}`;
      // EIO, EMFILE, EAGAIN …: the disk or the process is briefly short; a missing or
      // unreadable input (ENOENT, EACCES, EISDIR) stays failed with this message.
      if (code && TRANSIENT_ERRNO.has(code)) throw new TransientStepError(message, { cause: error });
      throw new StepFailedError(message, { cause: error });
    }
    hash.update("\0");
  }
  return `in-${hash.digest("hex").slice(0, 16)}`;
}

/** The error a hash stopped by `signal` rejects with: its reason when that is an error. */
function stoppedBy(signal: AbortSignal, cause?: unknown): Error {
  if (signal.reason instanceof Error) return signal.reason;
  const error = new Error(`reading the inputs stopped: ${String(signal.reason)}`, { cause });
  error.name = "AbortError";
  return error;
}

function identityOf(stat: fs.Stats): string {
  return `${stat.dev}:${stat.ino}:${stat.size}:${stat.mtimeMs}:${stat.ctimeMs}`;
}

export function idempotencyKey(rebuild: string, tenant: string | undefined, version: string): string {
  return crypto
    .createHash("sha256")
    .update(`${rebuild}:${tenant ?? ""}:${version}`)
    .digest("hex");
}

/** A version given by a caller ends up in a work path and a Redis hash: keep it plain. */
export const VERSION_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._:+-]{0,127}$/;
