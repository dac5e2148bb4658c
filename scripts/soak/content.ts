/**
 * What a soak build contains, as a pure function of (rebuild, tenant, version): the step script
 * (step-script.ts) writes it and the checker recomputes it. Same inputs, same bytes: builds are
 * content-addressed, so a repeat of a version must land on the same `builds/<hash>`.
 *
 * The step script carries its own copy of these formulas (it runs as plain JS in a temp dir);
 * a divergence shows up as every build being "corrupt", never as a silent pass.
 */
import crypto from "node:crypto";

/** The tenant as the step sees it: CLAIMWATCH_TENANT is empty for a rebuild without tenants. */
export const NO_TENANT = "-";

export function sha256Hex(text: string): string {
  return crypto.createHash("sha256").update(text).digest("hex");
}

export function contentKey(rebuild: string, tenant: string, version: string): string {
  return `${rebuild}|${tenant}|${version}`;
}

export function partCount(key: string, minParts: number, spanParts: number): number {
  return minParts + (parseInt(sha256Hex(key).slice(0, 8), 16) % (spanParts + 1));
}

export function partFileName(index: number): string {
  return `part-${String(index).padStart(3, "0")}.txt`;
}

export function partContent(key: string, index: number): string {
  const line = `${key}|${index}|${sha256Hex(`${key}|${index}`)}\n`;
  return line.repeat(40 + ((index * 7) % 60));
}

export interface BuildMeta {
  rebuild: string;
  tenant: string;
  version: string;
  parts: number;
}

export const META_FILE = "meta.json";

export function metaContent(meta: BuildMeta): string {
  return (
    JSON.stringify({ rebuild: meta.rebuild, tenant: meta.tenant, version: meta.version, parts: meta.parts }) + "\n"
  );
}
