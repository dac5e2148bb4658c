/**
 * The highest fence published for an output, kept on disk beside it (`<output>/.published-fence`),
 * durably: written to a temporary file, fsynced, renamed over the old one, directory fsynced.
 *
 * Redis may forget recent writes (RDB-only persistence, AOF `everysec`, an asynchronous replica
 * promoted): its fence counter and published pointer then go back. This file does not: an acquire
 * raises the counter past it before granting (`fenceFloor`), so a fence used for a publish is
 * never granted again, and repair never moves `current` to a pointer older than it.
 */
import crypto from "node:crypto";
import fs from "node:fs/promises";
import path from "node:path";
import { BUILD_HASH } from "./output";

const FILE = ".published-fence";

export interface PublishedFence {
  fence: number;
  /** The build published with that fence. */
  hash: string;
}

/** The file's content, or `null` when there is none (nothing published yet) or it is unreadable. */
export async function readPublishedFence(outputDir: string): Promise<PublishedFence | null> {
  try {
    const parsed = JSON.parse(await readSmallFile(path.join(outputDir, FILE))) as Partial<PublishedFence>;
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

/** The file holds `{"fence":<n>,"hash":"<32 hex>"}`: ~60 bytes. */
const READ_LIMIT = 4_096;

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
 * Records `fence` as published for `outputDir` (only ever upwards) unless a higher one is
 * recorded: called after the fenced publish succeeded and before `current` follows it. Resolves
 * once the data is on disk.
 */
export async function recordPublishedFence(outputDir: string, fence: number, hash: string): Promise<FenceRecord> {
  const known = await readPublishedFence(outputDir);
  if (known && known.fence > fence) return { status: "newer", known };
  if (known && known.fence === fence)
    return known.hash === hash ? { status: "recorded" } : { status: "fence-reused", known };
  const target = path.join(outputDir, FILE);
  const temp = path.join(outputDir, `${FILE}.${crypto.randomBytes(4).toString("hex")}`);
  const handle = await fs.open(temp, "w", 0o644);
  try {
    await handle.writeFile(JSON.stringify({ fence, hash }));
    await handle.sync();
  } finally {
    await handle.close();
  }
  try {
    await fs.rename(temp, target);
  } catch (error) {
    await fs.rm(temp, { force: true });
    throw error;
  }
  const dir = await fs.open(outputDir, "r");
  try {
    await dir.sync();
  } finally {
    await dir.close();
  }
  return { status: "recorded" };
}
