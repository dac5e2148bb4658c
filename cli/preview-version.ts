/**
 * The version `claimwatch trigger`'s preview asks about when none is given: the hash of the
 * rebuild's inputs, read for at most PREVIEW_INPUTS_MS as the dashboard's preview reads them,
 * but in a child process (./hash-inputs.ts), SIGKILLed once it has answered. Read in this
 * process, a read stuck in the kernel could never be waited for, and the CLI could only end by
 * SIGKILL (exit 137) instead of with its own exit code.
 */
import { spawn } from "node:child_process";
import { PREVIEW_INPUTS_MS } from "../lib/api/rebuilds";
import { entryArguments } from "../lib/launcher/bundle.mjs";

/** The child's start-up (its bundle's first build, or tsx) on a loaded machine, on top of its read. */
const START_MS = 30_000;

/** The inputs' version, or why the preview cannot tell (the dashboard's 400 wording). */
export async function previewVersion(
  inputPaths: readonly string[],
  limitMs = PREVIEW_INPUTS_MS,
): Promise<{ version: string } | { error: string }> {
  // ./hash-inputs.ts from its bundle, as the CLI's own, else through tsx (by its resolved
  // location: the CLI may run from any directory).
  const start = await entryArguments("cli/hash-inputs.ts");
  const child = spawn(process.execPath, [...start, String(limitMs), ...inputPaths], {
    stdio: ["ignore", "pipe", "ignore"],
  });
  let output = "";
  let timer: NodeJS.Timeout | undefined;
  // Its answer line, not its exit: a child whose abandoned read is stuck never exits by itself.
  const line = await new Promise<string | null>((resolve) => {
    timer = setTimeout(() => resolve(null), START_MS + limitMs);
    child.stdout.on("data", (chunk: Buffer) => {
      output += chunk.toString();
      if (output.includes("\n")) resolve(output.slice(0, output.indexOf("\n")));
    });
    child.once("exit", () => resolve(output.includes("\n") ? output.slice(0, output.indexOf("\n")) : null));
    child.once("error", () => resolve(null));
  });
  clearTimeout(timer);
  child.kill("SIGKILL");
  let answer: { version?: unknown; timedOut?: unknown } = {};
  try {
    answer = line ? (JSON.parse(line) as typeof answer) : {};
  } catch {
    // no answer: below
  }
  if (typeof answer.version === "string") return { version: answer.version };
  return {
    error:
      answer.timedOut === true || line === null
        ? `version: the inputs were not read within ${limitMs / 1000} s here; give a version`
        : "version: the inputs cannot be read here; give a version",
  };
}
