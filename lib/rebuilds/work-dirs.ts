/**
 * The work directories this process has made and not yet removed or promoted (build-and-
 * publish.ts tracks each one from its creation to its attempt's end). An attempt removes its own
 * on every path it ends by; a worker whose stop cannot wait for its attempts (one held on a
 * frozen Redis right after making its directory, or still sealing a big build) takes what is
 * left itself before it exits.
 *
 * Taking is a rename, not a delete: an attempt that is still running may be promoting that very
 * directory (sealed, then renamed into builds/<hash>), and a delete racing the seal could leave
 * a promote of an empty or partial tree under the full build's hash. Two renames of one
 * directory cannot both succeed: if the promote's came first, the stop finds nothing (ENOENT)
 * and the build is whole; if the stop's came first, the promote fails on ENOENT and nothing is
 * published. What was taken is then deleted; a delete cut short by the exit leaves a
 * `.stopped-*` directory that the workers' prune of old work dirs removes.
 */
import fs from "node:fs/promises";
import path from "node:path";
import { removeTree } from "./output";

const live = new Set<string>();

/** Name prefix of a work dir a stop took from its attempt (in the same `.work` directory). */
export const STOPPED_PREFIX = ".stopped-";

/** Tracks `dir` until the returned function is called. */
export function trackWorkDir(dir: string): () => void {
  live.add(dir);
  return () => live.delete(dir);
}

/**
 * Takes every tracked work dir from its attempt: renamed to `.stopped-<name>` beside it (gone
 * already — removed, or promoted by its attempt — is skipped). The taken paths, to delete.
 */
export async function takeLiveWorkDirs(): Promise<string[]> {
  const dirs = [...live];
  live.clear();
  const taken = await Promise.all(
    dirs.map(async (dir) => {
      const aside = path.join(path.dirname(dir), `${STOPPED_PREFIX}${path.basename(dir)}`);
      return fs.rename(dir, aside).then(
        () => aside,
        () => null, // ENOENT: its attempt removed or promoted it first
      );
    }),
  );
  return taken.filter((dir): dir is string => dir !== null);
}

/** Deletes taken work dirs (sealed ones too); one that cannot be deleted now is left to the prune. */
export async function removeTakenWorkDirs(dirs: readonly string[]): Promise<void> {
  await Promise.all(dirs.map((dir) => removeTree(dir).catch(() => {})));
}
