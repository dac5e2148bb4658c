/** claimwatch's version, as recorded in heartbeats and run records. */
import fs from "node:fs";
import path from "node:path";

const RELEASE = "0.1.0";

/**
 * The commit a checkout runs (`.git` beside the sources: `HEAD`, its branch's ref, or
 * `packed-refs`), 7 hex digits, or null (no checkout, an unreadable one). Read once, at start.
 */
export function checkoutCommit(root: string): string | null {
  try {
    const gitDir = path.join(root, ".git");
    const head = fs.readFileSync(path.join(gitDir, "HEAD"), "utf8").trim();
    const ref = /^ref: (refs\/\S+)$/.exec(head)?.[1];
    let commit: string | undefined = ref ? undefined : head;
    if (ref) {
      commit = fs.existsSync(path.join(gitDir, ref))
        ? fs.readFileSync(path.join(gitDir, ref), "utf8").trim()
        : fs
            .readFileSync(path.join(gitDir, "packed-refs"), "utf8")
            .split("\n")
            .find((line) => line.endsWith(` ${ref}`))
            ?.split(" ")[0];
    }
    return commit && /^[0-9a-f]{40}$/.test(commit) ? commit.slice(0, 7) : null;
  } catch {
    return null;
  }
}

/**
 * `0.1.0`, and the commit when run from a checkout (`0.1.0+a9d499f`): during a rolling deploy the
 * Workers page tells the old workers from the new.
 */
export const APP_VERSION = ((commit) => (commit ? `${RELEASE}+${commit}` : RELEASE))(checkoutCommit(process.cwd()));
