/**
 * `npm run verify -- <rebuild> [tenant]`: re-hashes every published build of a rebuild's output
 * (each tenant's, or one) and compares it with its name. Prints one line per build that differs
 * and exits 1 when any does; 0 when all are whole; 2 for a bad argument (the valid names listed).
 */
import { loadConfigOrExit } from "../lib/config";
import {
  loadDefinitionsOrExit,
  outputDirOf,
  tenantProblem,
  tenantsOf,
  unknownRebuildProblem,
} from "../lib/rebuilds/definitions";
import { verifyBuilds } from "../lib/rebuilds/output";

const config = loadConfigOrExit("claimwatch verify");
const definitions = loadDefinitionsOrExit(config.definitionsPath, "claimwatch verify", config.definitionsSource);
const [name, tenantArg, ...extra] = process.argv.slice(2);
const usage = (problem: string): never => {
  process.stderr.write(`claimwatch verify: ${problem}\nusage: npm run verify -- <rebuild> [tenant]\n`);
  process.exit(2);
};
if (!name || extra.length > 0) usage(name ? "too many arguments" : "name a rebuild");
const rebuild = definitions.rebuilds.get(name!);
if (!rebuild) usage(unknownRebuildProblem(definitions, name!));
const tenants = tenantsOf(rebuild!);
const tenantError = tenantArg === undefined ? null : tenantProblem(rebuild!, tenantArg);
if (tenantError) usage(tenantError);

let checked = 0;
let changed = 0;
for (const tenant of tenantArg !== undefined ? [tenantArg] : tenants) {
  const outputDir = outputDirOf(rebuild!, tenant);
  const result = await verifyBuilds(outputDir);
  checked += result.checked;
  for (const build of result.changed) {
    changed += 1;
    process.stdout.write(`CHANGED ${build.path} (hashes to ${build.actual})\n`);
  }
}
process.stdout.write(`${checked} build(s) checked, ${changed} changed\n`);
process.exit(changed > 0 ? 1 : 0);
