/**
 * Whether a run whose final record was never written published (its worker stopped, or Redis
 * refused or lost the write): asked by whoever closes such a record — the job's next attempt, the
 * abandoned-run sweep — so that it ends `rebuilt`, naming its build, rather than `aborted` ("that
 * build may be published"). The claims Redis's published pointer names the run that published.
 */
import type { Redis } from "ioredis";
import { claimName, readPublishedByRun } from "../claims";
import type { RedisKeys } from "../redis/keys";
import { publishingMark } from "../runs/records";
import { settledWithin } from "../settled-within";
import { tenantProblem, type Definitions } from "./definitions";

/** How long the claims Redis is waited for when asked whether a run published. */
const PUBLISHED_BY_RUN_READ_MS = 1_000;

/**
 * What the claims Redis's published pointer says `run` published, as its record's publishing mark
 * (`publishingMark`: "<fence> <build>"), or null: another run's publish or none, a rebuild or
 * tenant no longer defined, or no answer within PUBLISHED_BY_RUN_READ_MS. A record whose mark is
 * this one published and ends rebuilt; without, it is closed aborted, its reason saying the build
 * may be published.
 */
export async function publishedByRun(
  deps: { claims: Pick<Redis, "hgetall">; keys: RedisKeys; definitions: Definitions },
  run: { runId: string; rebuild: string | null; tenant: string | null },
): Promise<string | null> {
  const definition = run.rebuild ? deps.definitions.rebuilds.get(run.rebuild) : undefined;
  const tenant = run.tenant || undefined;
  if (!definition || tenantProblem(definition, tenant)) return null;
  const read = readPublishedByRun(deps.claims, deps.keys, claimName(definition.claimPath, tenant), run.runId).then(
    (pointer) => (pointer ? publishingMark({ fence: pointer.fence, buildHash: pointer.value }) : null),
    () => null,
  );
  return (await settledWithin(read, PUBLISHED_BY_RUN_READ_MS)) ? read : null;
}
