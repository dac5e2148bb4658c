/**
 * `claimwatch verify <rebuild> [tenant]` (and `npm run verify`): re-hashes every published build of
 * a rebuild's output (each tenant's, or one) and compares it with its name. Needs no Redis.
 */
import { outputDirOf, tenantProblem, tenantsOf, unknownRebuildProblem } from "../../lib/rebuilds/definitions";
import { MISSING_BUILD, verifyBuilds } from "../../lib/rebuilds/output";
import { EXIT, usageError } from "../outcome";
import { loadSetup } from "../session";
import type { CommandSpec } from "./spec";

export const verify: CommandSpec = {
  usage: "verify <rebuild> [tenant]",
  summary: "re-hash the published builds of a rebuild and report any that changed on disk (exit 1)",
  options(command) {
    command.option("--tenant <tenant>", "only this tenant's builds (or give it as the second argument)");
  },
  async run([name, tenantArg], options) {
    const { definitions } = loadSetup();
    const rebuild = definitions.rebuilds.get(name!);
    if (!rebuild) throw usageError(unknownRebuildProblem(definitions, name!));
    const tenant = (options.tenant as string | undefined) ?? tenantArg;
    const problem = tenant === undefined ? null : tenantProblem(rebuild, tenant);
    if (problem) throw usageError(problem);
    let checked = 0;
    const changed: { path: string; actual: string }[] = [];
    for (const each of tenant !== undefined ? [tenant] : tenantsOf(rebuild)) {
      const result = await verifyBuilds(outputDirOf(rebuild, each));
      checked += result.checked;
      changed.push(...result.changed.map(({ path, actual }) => ({ path, actual })));
    }
    return {
      exitCode: changed.length > 0 ? EXIT.refused : EXIT.ok,
      json: { rebuild: name, tenant: tenant ?? null, checked, changed },
      human: [
        ...changed.map((build) =>
          build.actual === MISSING_BUILD
            ? `MISSING ${build.path} (current points at it; rebuild its version with force)`
            : `CHANGED ${build.path} (hashes to ${build.actual})`,
        ),
        `${checked} build(s) checked, ${changed.length} changed`,
      ],
    };
  },
};
