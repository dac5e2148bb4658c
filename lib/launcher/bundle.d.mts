/** Types of bundle.mjs (plain JavaScript, so bin/claimwatch.mjs runs it without tsx). */
export function bundled(
  entry: string,
  onBuild?: (line: string) => void,
  where?: { root?: string; cache?: string },
): Promise<string | null>;
export function entryArguments(entry: string, onBuild?: (line: string) => void): Promise<string[]>;
