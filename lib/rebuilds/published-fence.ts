/**
 * The highest fence published for an output, kept on disk beside it, durably. Redis may forget
 * recent writes (RDB-only persistence, AOF `everysec`, an asynchronous replica promoted): its
 * fence counter and published pointer then go back. This record does not: an acquire raises the
 * counter past it before granting (`fenceFloor`), so a fence used for a publish is never granted
 * again, and repair never moves `current` to a pointer older than it.
 *
 * Each recorded fence is its own file, `<output>/.published-fence@<fence>`, holding its build's
 * hash, and the record is the highest of them. A file is written whole (temporary file, fsync),
 * then linked to its name — `link` fails when the name exists, so a fence names one build, and the
 * first writer wins — and the directory is fsynced. Files are never overwritten, so two writers
 * (a publisher and a repair, or a paused publisher and a newer one) cannot put the record back:
 * with one file overwritten by rename, the later rename won even when it carried the lower fence.
 * Lower files are removed after a higher one is on disk (best effort: only the highest counts).
 * The single `.published-fence` file earlier versions wrote is still read, never written.
 */
import crypto from "node:crypto";
import fs from "node:fs/promises";
import path from "node:path";
import { BUILD_HASH } from "./output";

/** Earlier versions' record: one JSON file, `{"fence":<n>,"hash":"<hash>"}`, replaced by rename. */
const LEGACY_FILE = ".published-fence";
const ENTRY_PREFIX = ".published-fence@";
const ENTRY = /^\.published-fence@([1-9]\d{0,15})$/;

export interface PublishedFence {
  fence: number;
  /** The build published with that fence. */
  hash: string;
}

/**
 * The highest fence recorded for `outputDir` and its build, or `null` when none is (nothing
 * published yet, or no directory). An entry whose hash cannot be read still counts with its fence
 * (its name says that fence published), with the hash "" (not a build hash: repair then neither
 * restores the pointer from it nor moves `current`).
 */
export async function readPublishedFence(outputDir: string): Promise<PublishedFence | null> {
  let names: string[];
  try {
    names = await fs.readdir(outputDir);
  } catch {
    return null;
  }
  const legacy = names.includes(LEGACY_FILE) ? await readLegacy(outputDir) : null;
  const top = fencesIn(names)[0];
  if (top === undefined || (legacy && legacy.fence >= top)) return legacy;
  return { fence: top, hash: (await readEntryHash(outputDir, top)) ?? "" };
}

/** The fences named by entries among `names`, highest first. */
function fencesIn(names: string[]): number[] {
  return names
    .map((name) => ENTRY.exec(name)?.[1])
    .filter((fence): fence is string => fence !== undefined)
    .map(Number)
    .filter(Number.isSafeInteger)
    .sort((a, b) => b - a);
}

async function readEntryHash(outputDir: string, fence: number): Promise<string | null> {
  try {
    const hash = (await readSmallFile(path.join(outputDir, `${ENTRY_PREFIX}${fence}`))).trim();
    return BUILD_HASH.test(hash) ? hash : null;
  } catch {
    return null;
  }
}

async function readLegacy(outputDir: string): Promise<PublishedFence | null> {
  try {
    const parsed = JSON.parse(await readSmallFile(path.join(outputDir, LEGACY_FILE))) as Partial<PublishedFence>;
    if (!Number.isSafeInteger(parsed.fence) || (parsed.fence ?? 0) <= 0) return null;
    if (typeof parsed.hash !== "string" || !BUILD_HASH.test(parsed.hash)) return null;
    return { fence: parsed.fence!, hash: parsed.hash };
  } catch {
    return null;
  }
}

/**
 * A file of at most `READ_LIMIT` bytes (a longer one is cut, and then fails to parse): open, one
 * read, close — one trip to the thread pool fewer than `readFile`, on every rebuild's path.
 */
async function readSmallFile(file: string): Promise<string> {
  const handle = await fs.open(file, "r");
  try {
    const { bytesRead, buffer } = await handle.read(Buffer.alloc(READ_LIMIT), 0, READ_LIMIT, 0);
    return buffer.toString("utf8", 0, bytesRead);
  } finally {
    await handle.close();
  }
}

/** An entry holds a build hash (32 hex); the legacy file ~60 bytes of JSON. */
const READ_LIMIT = 4_096;

/**
 * A fenced publish whose fence the disk did not take (full, failing): the publish is in the
 * claims Redis only, which may lose it. The attempt is not done: it fails as transient (another
 * attempt publishes again and records its fence), `current` stays, and the version is not marked
 * rebuilt, so the request is not lost with the publish.
 */
export class FenceNotRecordedError extends Error {
  override name = "FenceNotRecordedError";
}

/**
 * What `recordPublishedFence` found:
 *   recorded     this fence and build are on disk (now, or already: a repeat)
 *   newer        a higher fence was recorded meanwhile: `current` stays with that newer build
 *   fence-reused this fence is recorded with another build: the claims Redis lost writes and
 *                granted a fence that had published already; the build recorded first keeps
 *                `current`, and this publish counts as not made
 */
export type FenceRecord = { status: "recorded" } | { status: "newer" | "fence-reused"; known: PublishedFence };

/**
 * Records `fence` as published for `outputDir` with its build (only ever upwards: a lower fence
 * than one recorded is not written) unless a higher one is recorded: called after the fenced
 * publish succeeded and before `current` follows it, and by repair before it moves `current` to
 * a pointer its publisher could not record. Resolves once the record is on disk; throws when the
 * disk does not take it (full, failing).
 */
export async function recordPublishedFence(outputDir: string, fence: number, hash: string): Promise<FenceRecord> {
  const known = await readPublishedFence(outputDir);
  if (known && known.fence > fence) return { status: "newer", known };
  if (known && known.fence === fence) {
    if (known.hash !== hash) return { status: "fence-reused", known };
    // Recorded by an earlier call whose directory sync may have failed: synced again before this
    // call says "on disk" (a sync error is reported once; this is the most a process can do).
    await syncDirectory(outputDir);
    return { status: "recorded" };
  }
  const entry = path.join(outputDir, `${ENTRY_PREFIX}${fence}`);
  const temp = path.join(outputDir, `.published-fence-writing.${crypto.randomBytes(6).toString("hex")}`);
  try {
    const handle = await fs.open(temp, "w", 0o644);
    try {
      await handle.writeFile(hash);
      await handle.sync();
    } finally {
      await handle.close();
    }
    await fs.link(temp, entry);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
    // Another writer recorded this fence meanwhile: with this build, or (Redis granted it twice)
    // with another, which keeps it.
    const recorded = await readEntryHash(outputDir, fence);
    if (recorded !== hash) return { status: "fence-reused", known: { fence, hash: recorded ?? "" } };
  } finally {
    await fs.rm(temp, { force: true }).catch(() => {});
  }
  await syncDirectory(outputDir);
  // A higher fence recorded while this one was written keeps `current`; lower ones can go.
  const names = await fs.readdir(outputDir);
  if ((fencesIn(names)[0] ?? 0) > fence) {
    const known = await readPublishedFence(outputDir);
    if (known && known.fence > fence) return { status: "newer", known };
  }
  await removeBelow(outputDir, names, fence);
  return { status: "recorded" };
}

async function syncDirectory(dir: string): Promise<void> {
  const handle = await fs.open(dir, "r");
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}

/** Entries (and the legacy file) below `fence`, once `fence` is on disk: only the highest counts. */
async function removeBelow(outputDir: string, names: string[], fence: number): Promise<void> {
  const remove = fencesIn(names)
    .filter((f) => f < fence)
    .map((f) => `${ENTRY_PREFIX}${f}`);
  if (names.includes(LEGACY_FILE) && ((await readLegacy(outputDir))?.fence ?? 0) < fence) remove.push(LEGACY_FILE);
  await Promise.all(remove.map((name) => fs.rm(path.join(outputDir, name), { force: true }).catch(() => {})));
}
