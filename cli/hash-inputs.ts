/**
 * The version of a rebuild's inputs, read in a child process of `claimwatch trigger` (its
 * preview, ./preview-version.ts): a read stuck in the kernel (a FIFO nobody writes to, a hung
 * mount) then holds the child's thread, not the CLI's. Reads for at most <limit ms>, as the
 * dashboard's preview does. Usage: node --import tsx cli/hash-inputs.ts <limit ms> <input>… (or its bundle);
 * prints one JSON line, `{"version": "…"}` or `{"error": "…", "timedOut": bool}`, and is then
 * SIGKILLed by the CLI (with a stuck read it could not exit by itself).
 */
import { describeError } from "../lib/describe-error";
import { hashInputs } from "../lib/rebuilds/version";

const [limitMs, ...inputPaths] = process.argv.slice(2);
const signal = AbortSignal.timeout(Number(limitMs));
const answer = await hashInputs(inputPaths, { signal }).then(
  (version) => ({ version }),
  (error: unknown) => ({ error: describeError(error), timedOut: signal.aborted }),
);
process.stdout.write(`${JSON.stringify(answer)}\n`);
