/**
 * The claim an output directory is named by, written in it: `<output>/.claimwatch-claim` holds the
 * claim name of the first worker that built it. Claims are named for the output's real path
 * (definitions.ts `claimPath`), and a bind mount or an NFS mount reached at another place is not
 * seen through by `realpath`: one directory got two claims, two fence counters and two published
 * pointers, and each worker's repair said Redis had lost the other's publishes (helper-135). A
 * worker that names the directory's claim otherwise finds the file and refuses the run, naming
 * the claim (and so the path) the directory belongs to — the same directory is the same file,
 * whichever path reaches it. Written once, exclusively (a link of the whole file: two workers
 * racing agree on the first), never rewritten.
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
 * Makes sure `outputDir` is named by `claim`: records it when the directory names none yet
 * (making the directory), throws `OutputClaimedElsewhereError` when it names another. A disk
 * that refuses the read or the write throws its own error (transient by its code).
 */
export async function pinOutputClaim(outputDir: string, claim: string): Promise<void> {
  const file = path.join(outputDir, OUTPUT_CLAIM_FILE);
  let recorded = await readRecorded(file);
  if (recorded === null) {
    await fs.mkdir(outputDir, { recursive: true });
    const temp = outputTempName(outputDir, ".claimwatch-claim-writing.");
    try {
      await fs.writeFile(temp, `${claim}\n`, { flag: "wx" });
      await fs.link(temp, file).catch((error: NodeJS.ErrnoException) => {
        if (error.code !== "EEXIST") throw error; // another worker recorded first: its claim is read below
      });
    } finally {
      await fs.rm(temp, { force: true }).catch(() => {});
    }
    recorded = await readRecorded(file);
  }
  if (recorded === claim) return;
  throw new OutputClaimedElsewhereError(
    `output ${outputDir} is the directory of claim '${recorded ?? "?"}' (its ${OUTPUT_CLAIM_FILE} says so), not of '${claim}': one directory reached by two paths (a bind or NFS mount?) would get two claims and two fence counters; give every worker the same path to it (or, if the output was moved on purpose, remove that file)`,
  );
}

async function readRecorded(file: string): Promise<string | null> {
  try {
    return (await fs.readFile(file, "utf8")).trim();
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return null;
    throw error;
  }
}
