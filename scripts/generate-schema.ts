/** Writes claimwatch.schema.json (JSON Schema of the definitions file) from the zod schema. */
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { definitionsJsonSchema } from "../lib/rebuilds/definitions";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
export const SCHEMA_FILE = path.join(root, "claimwatch.schema.json");
export const renderSchema = () =>
  JSON.stringify({ title: "claimwatch rebuild definitions", ...definitionsJsonSchema() }, null, 2) + "\n";

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  fs.writeFileSync(SCHEMA_FILE, renderSchema());
  process.stdout.write(`wrote ${path.relative(root, SCHEMA_FILE)}\n`);
}
