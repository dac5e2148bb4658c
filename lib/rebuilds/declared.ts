/**
 * Which rebuilds and tenants some process's definitions declared: written by every trigger (its
 * file named the job's rebuild and tenant) and by every worker at its start (all of its own).
 * During a rolling deploy a job for a rebuild or tenant that only the new definitions declare can
 * reach a worker still on the old ones (black-box helper-153): that worker keeps the request for
 * a worker that knows it (a deferral, bounded) instead of failing it for good. A job nobody
 * declared (queued by hand with a misspelt name) still fails at once.
 */
import type { Redis } from "ioredis";
import type { RedisKeys } from "../redis/keys";
import type { Definitions } from "./definitions";

/** How long a job whose rebuild or tenant this worker does not declare waits for a worker that does, per pickup. */
export const UNDECLARED_DEFER_MS = 15_000;
/** Pickups a job whose rebuild or tenant was declared elsewhere is kept for (about 10 minutes in all). */
export const UNDECLARED_PICKUPS = 40;

/** The HASH field of a rebuild (and tenant): names follow lib/names.ts, so a space cannot occur in one. */
export const declaredField = (rebuild: string, tenant?: string | null): string =>
  tenant ? `${rebuild} ${tenant}` : rebuild;

/** Notes that a job for `rebuild` (and `tenant`) was queued by a process whose definitions declare it. */
export async function declareTarget(
  client: Pick<Redis, "hset">,
  keys: RedisKeys,
  rebuild: string,
  tenant?: string | null,
): Promise<void> {
  await client.hset(keys.declaredTargets, declaredField(rebuild, tenant), String(Date.now()));
}

/** Every rebuild and tenant `definitions` declare, as `declaredField`s (also in each worker's heartbeat). */
export function declaredFields(definitions: Pick<Definitions, "rebuilds">): string[] {
  const fields: string[] = [];
  for (const definition of definitions.rebuilds.values()) {
    for (const tenant of definition.tenants ?? [null]) fields.push(declaredField(definition.name, tenant));
  }
  return fields;
}

/** Notes every rebuild and tenant `definitions` declare (a worker at its start). */
export async function declareTargets(
  client: Pick<Redis, "hset">,
  keys: RedisKeys,
  definitions: Pick<Definitions, "rebuilds">,
): Promise<void> {
  const now = String(Date.now());
  const fields = Object.fromEntries(declaredFields(definitions).map((field) => [field, now]));
  if (Object.keys(fields).length > 0) await client.hset(keys.declaredTargets, fields);
}

/**
 * How long a declaration counts: a deploy is over well within it, and a rebuild or tenant taken
 * out of every file since (or a trigger from a file with a typo, once fixed) stops keeping its
 * stray jobs waiting (review helper-155). Every worker start and every trigger renews it.
 */
export const DECLARED_FOR_MS = 24 * 3_600_000;

/** Whether some process declared `rebuild` (and `tenant`) within DECLARED_FOR_MS; null when Redis did not answer. */
export async function wasDeclared(
  client: Pick<Redis, "hget">,
  keys: RedisKeys,
  rebuild: string,
  tenant?: string | null,
): Promise<boolean | null> {
  return client.hget(keys.declaredTargets, declaredField(rebuild, tenant)).then(
    (at) => at !== null && Date.now() - Number(at) <= DECLARED_FOR_MS,
    () => null,
  );
}
