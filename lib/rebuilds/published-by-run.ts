/**
 * Whether a run whose final record was never written published (its worker stopped, or Redis
 * refused or lost the write): asked by whoever closes such a record — the job's next attempt, the
 * abandoned-run sweep — so that it ends `rebuilt`, naming its build, rather than `aborted` ("that
 * build may be published"). The claims Redis's published pointer names the run that published;
 * the output's durable fence record may contradict it.
 */
import type { Redis } from "ioredis";
import { claimName, readPublishedByRun } from "../claims";
import type { RedisKeys } from "../redis/keys";
import { publishedProof } from "../runs/records";
import { settledWithin } from "../settled-within";
import { outputDirOf, tenantProblem, type Definitions } from "./definitions";
import { readPublishedFence } from "./published-fence";

/** How long the claims Redis and the output's disk are waited for when asked whether a run published. */
const PUBLISHED_BY_RUN_READ_MS = 1_000;

/**
 * What `run` published, as a `publishedProof` (its record's publishing mark "<fence> <build>",
 * then the publish's time), when the claims Redis's published pointer names the run and the
 * output's durable fence record (published-fence.ts) does not contradict it. A record at that
 * fence with another build means the claims Redis granted the fence twice (the attempt would have
 * said "not published", and repair puts the pointer back to the recorded build); a higher
 * recorded fence means the claims Redis lost newer publishes. No record of the fence yet (the
 * publisher stopped before it, or the disk refused it) is no contradiction: repair records it and
 * moves `current` to the pointer (repair.ts), as it does for an output this machine does not hold.
 * Null otherwise: another run's publish or none, a contradiction, an unreadable record, a rebuild
 * or tenant no longer defined, or no answer within PUBLISHED_BY_RUN_READ_MS. A record whose mark
 * it proves ends rebuilt; without, it is closed aborted, its reason saying the build may be
 * published.
 */
export async function publishedByRun(
  deps: { claims: Pick<Redis, "hgetall">; keys: RedisKeys; definitions: Definitions },
  run: { runId: string; rebuild: string | null; tenant: string | null },
): Promise<string | null> {
  const definition = run.rebuild ? deps.definitions.rebuilds.get(run.rebuild) : undefined;
  const tenant = run.tenant || undefined;
  if (!definition || tenantProblem(definition, tenant)) return null;
  const name = claimName(definition.claimPath, tenant);
  const read = (async () => {
    const pointer = await readPublishedByRun(deps.claims, deps.keys, name, run.runId);
    if (!pointer) return null;
    const durable = await readPublishedFence(outputDirOf(definition, tenant));
    if (
      durable &&
      (durable.fence > pointer.fence || (durable.fence === pointer.fence && durable.hash !== pointer.value))
    )
      return null;
    return publishedProof({ fence: pointer.fence, buildHash: pointer.value, publishedAt: pointer.publishedAt });
  })().catch(() => null);
  return (await settledWithin(read, PUBLISHED_BY_RUN_READ_MS)) ? read : null;
}
