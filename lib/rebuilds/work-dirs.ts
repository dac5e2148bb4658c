/**
 * The work directories this process has made and not yet removed or promoted (build-and-
 * publish.ts tracks each one from its creation to its attempt's end). An attempt removes its own
 * in every path it ends by; a worker whose stop cannot wait for its attempts (one held on a
 * frozen Redis, right after making its directory) removes what is left itself, before it exits.
 * A work dir is private to its claim grant and never published from, so removing it under an
 * attempt that is still in flight costs that attempt nothing but its build.
 */
import fs from "node:fs/promises";

const live = new Set<string>();

/** Tracks `dir` until the returned function is called. */
export function trackWorkDir(dir: string): () => void {
  live.add(dir);
  return () => live.delete(dir);
}

/** Removes every tracked work dir (gone already is fine); how many there were. */
export async function removeLiveWorkDirs(): Promise<number> {
  const dirs = [...live];
  await Promise.all(
    dirs.map(async (dir) => {
      await fs.rm(dir, { recursive: true, force: true }).catch(() => {});
      live.delete(dir);
    }),
  );
  return dirs.length;
}
