/**
 * The claim an output directory is named by, written in it: `<output>/.claimwatch-claim` holds the
 * claim name of the first worker that built it. Claims are named for the output's real path
 * (definitions.ts `claimPath`), and a bind mount or an NFS mount reached at another place is not
 * seen through by `realpath`: one directory got two claims, two fence counters and two published
 * pointers, and each worker's repair said Redis had lost the other's publishes (helper-135). A
 * worker that names the directory's claim otherwise finds the file and refuses the run, naming
 * the claim (and so the path) the directory belongs to — the same directory is the same file,
 * whichever path reaches it.
 *
 * A guard against a misconfiguration, never a reason to stop a run otherwise (review
 * helper-141): the file is written once, whole (synced, then linked: two workers racing agree on
 * the first), and only by a worker whose definitions still name the directory by its real path
 * (a worker with stale definitions — a symlinked release directory switched under it — writes
 * nothing). A disk that refuses the read or the write (full, failing, no hard links) leaves the
 * run to go on without it; an empty or unreadable file refuses nothing.
 */
import fs from "node:fs/promises";
import path from "node:path";
import { outputTempName } from "./output";

export const OUTPUT_CLAIM_FILE = ".claimwatch-claim";

/** The output directory is the claim of another path (a permanent failure: the configuration must change). */
export class OutputClaimedElsewhereError extends Error {
  override name = "OutputClaimedElsewhereError";
}

/**
 * Makes sure `outputDir` is named by `claim`: throws `OutputClaimedElsewhereError` when its file
 * names another claim; records `claim` when it names none yet and the directory's real path is
 * `realPath` (the one the claim is named for). Never throws for the disk.
 */
export async function pinOutputClaim(outputDir: string, claim: string, realPath: string): Promise<void> {
  const file = path.join(outputDir, OUTPUT_CLAIM_FILE);
  let recorded = await readRecorded(file);
  if (recorded === undefined) {
    if (!(await record(outputDir, file, claim, realPath))) return;
    recorded = await readRecorded(file);
  }
  if (!recorded || recorded === claim) return;
  throw new OutputClaimedElsewhereError(claimedElsewhere(outputDir, recorded, claim));
}

/**
 * Why a run of `claim` writing `outputDir` would fail now (`pinOutputClaim`'s refusal), or null
 * when it would not: "Rebuild now"'s preview. Only reads; null when the file cannot be read.
 */
export async function outputClaimProblem(outputDir: string, claim: string): Promise<string | null> {
  const recorded = await readRecorded(path.join(outputDir, OUTPUT_CLAIM_FILE));
  return !recorded || recorded === claim ? null : claimedElsewhere(outputDir, recorded, claim);
}

function claimedElsewhere(outputDir: string, recorded: string, claim: string): string {
  return `output ${outputDir} is the directory of claim '${recorded}' (its ${OUTPUT_CLAIM_FILE} says so), not of '${claim}': one directory reached by two paths (a bind or NFS mount?) would get two claims and two fence counters; give every worker the same path to it (or, if the output was moved on purpose, remove that file)`;
}

/** The claim the file names; "" when it is empty or cannot be read (nothing to go by); undefined when there is none. */
async function readRecorded(file: string): Promise<string | undefined> {
  try {
    const text = (await fs.readFile(file, "utf8")).trim();
    return text.includes("\n") ? "" : text;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "ENOENT" ? undefined : "";
  }
}

/** Writes the file once (whole, synced, linked into place); false when it was not written by anyone here. */
async function record(outputDir: string, file: string, claim: string, realPath: string): Promise<boolean> {
  try {
    await fs.mkdir(outputDir, { recursive: true });
    if ((await fs.realpath(outputDir)) !== realPath) return false;
  } catch {
    return false;
  }
  const temp = outputTempName(outputDir, ".claimwatch-claim-writing.");
  try {
    const handle = await fs.open(temp, "wx");
    try {
      await handle.writeFile(`${claim}\n`);
      await handle.sync();
    } finally {
      await handle.close();
    }
    await fs.link(temp, file);
    return true;
  } catch (error) {
    // Another worker's first: read below. Any other answer (full, failing, no hard links): none.
    return (error as NodeJS.ErrnoException).code === "EEXIST";
  } finally {
    await fs.rm(temp, { force: true }).catch(() => {});
  }
}
