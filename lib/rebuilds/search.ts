/**
 * Name search over the rebuild definitions, which are in memory: what the Rebuilds and Runs
 * lists mean by `q`. A case-insensitive substring of the rebuild name, or for a rebuild×tenant
 * row of `rebuild/tenant` (so `acme` finds a tenant, `tiles/ac` one rebuild's tenants).
 */
import { tenantsOf, type Definitions, type RebuildDefinition } from "./definitions";

/** One row of the Rebuilds list: a rebuild, or one tenant of a rebuild with tenants. */
export interface RebuildRow {
  definition: RebuildDefinition;
  tenant: string | undefined;
  /** `rebuild/tenant` (or the rebuild name) in lower case: what a search is matched against. */
  searchText: string;
}

/** Rows per definitions object: built once (10k rows are a few hundred kB), then only filtered. */
const rowsCache = new WeakMap<Definitions, RebuildRow[]>();

/** Every rebuild×tenant row, in definitions order (tenants in their configured order). */
export function rebuildRows(definitions: Definitions): RebuildRow[] {
  let rows = rowsCache.get(definitions);
  if (!rows) {
    rows = [];
    for (const definition of definitions.rebuilds.values()) {
      for (const tenant of tenantsOf(definition)) {
        const text = tenant === undefined ? definition.name : `${definition.name}/${tenant}`;
        rows.push({ definition, tenant, searchText: text.toLowerCase() });
      }
    }
    rowsCache.set(definitions, rows);
  }
  return rows;
}

/** The rows `q` finds (all of them without a `q`). */
export function searchRebuildRows(definitions: Definitions, q: string | undefined): RebuildRow[] {
  const rows = rebuildRows(definitions);
  if (!q) return rows;
  const needle = q.toLowerCase();
  return rows.filter((row) => row.searchText.includes(needle));
}

/** Names of the rebuilds whose name contains `q` (case-insensitive), sorted. */
export function searchRebuildNames(definitions: Definitions, q: string): string[] {
  const needle = q.toLowerCase();
  return [...definitions.rebuilds.keys()].filter((name) => name.toLowerCase().includes(needle)).sort();
}
