/**
 * The shipped claimwatch.yaml, copied into the e2e data dir (so builds land there, not in the
 * repo), with the example inputs generated next to it.
 */
import fs from "node:fs";
import path from "node:path";
import { parse, stringify } from "yaml";
import { writeParcels } from "../../scripts/examples/parcels";

export function writeE2eDefinitions(dir: string): string {
  const shipped = parse(fs.readFileSync("claimwatch.yaml", "utf8")) as {
    rebuilds: Record<string, { steps: { run?: string[]; cwd?: string }[] }>;
  };
  // The incidents step runs a script from this repo: point it there.
  for (const step of shipped.rebuilds.incidents?.steps ?? []) {
    if (step.run) step.run = step.run.map((arg) => (arg.startsWith("scripts/") ? path.resolve(arg) : arg));
  }
  writeParcels(path.join(dir, "data", "sources", "parcels.geojson"));
  const file = path.join(dir, "claimwatch.yaml");
  fs.writeFileSync(file, stringify(shipped));
  return file;
}
