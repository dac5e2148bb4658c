/**
 * Versions and idempotency keys. A rebuild's version is the trigger's, else the content hash of
 * its inputs; the idempotency key is sha256(`rebuild:tenant:version`): same inputs, same key.
 */
import crypto from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { StepFailedError } from "./steps/context";

/** sha256 over each input's name and bytes, in the order the definition lists them. */
export async function hashInputs(inputPaths: readonly string[]): Promise<string> {
  const hash = crypto.createHash("sha256");
  for (const file of inputPaths) {
    hash.update(`${path.basename(file)}\0`);
    try {
      for await (const chunk of fs.createReadStream(file)) hash.update(chunk as Buffer);
    } catch (error) {
      throw new StepFailedError(`input ${file} cannot be read: ${(error as NodeJS.ErrnoException).code ?? error}`);
    }
    hash.update("\0");
  }
  return `in-${hash.digest("hex").slice(0, 16)}`;
}

export function idempotencyKey(rebuild: string, tenant: string | undefined, version: string): string {
  return crypto
    .createHash("sha256")
    .update(`${rebuild}:${tenant ?? ""}:${version}`)
    .digest("hex");
}

/** A version given by a caller ends up in a work path and a Redis hash: keep it plain. */
export const VERSION_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._:+-]{0,127}$/;
