/**
 * A rebuild and tenant named by a request, checked against the definitions. Where the name is
 * decides the answer: a rebuild the URL names and the definitions lack is a 404 (nothing is at
 * that address); a name in a body or query string that does not fit is bad input, a 400 naming
 * the field. Each message lists the valid names.
 */
import {
  tenantProblem,
  unknownRebuildProblem,
  type Definitions,
  type RebuildDefinition,
} from "../rebuilds/definitions";
import { NAME_PATTERN as NAME } from "../names";
import { badRequest, notFound } from "./errors";

/** The rebuild of `/api/rebuilds/{name}/…`: 404 naming the rebuilds when there is none. */
export function rebuildOfUrl(definitions: Pick<Definitions, "rebuilds">, name: string): RebuildDefinition {
  const definition = NAME.test(name) ? definitions.rebuilds.get(name) : undefined;
  if (!definition) throw notFound(unknownRebuildProblem(definitions, name));
  return definition;
}

/**
 * `tenant` of a body or query string that says what to act on (trigger, preview, a schedule's
 * tenant): a rebuild with tenants needs one of them, one without takes none.
 */
export function checkTenantField(definition: RebuildDefinition, tenant: string | undefined): void {
  const problem = tenantProblem(definition, tenant);
  if (problem) throw badRequest(`tenant: ${problem}`);
}

/**
 * `rebuild` and `tenant` of a list's filter (runs, queue): both optional, but a tenant only with
 * its rebuild; leaving out the tenant of a rebuild with tenants means all of them.
 */
export function checkRebuildFilter(
  definitions: Pick<Definitions, "rebuilds">,
  filter: { rebuild?: string | undefined; tenant?: string | undefined },
): void {
  if (filter.tenant !== undefined && filter.rebuild === undefined) {
    throw badRequest("tenant: give the rebuild it belongs to as well");
  }
  if (filter.rebuild === undefined) return;
  const definition = definitions.rebuilds.get(filter.rebuild);
  if (!definition) throw badRequest(`rebuild: ${unknownRebuildProblem(definitions, filter.rebuild)}`);
  if (filter.tenant !== undefined) checkTenantField(definition, filter.tenant);
}
