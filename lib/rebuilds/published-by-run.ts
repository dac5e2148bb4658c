/**
 * Whether a run whose final record was never written published (its worker stopped, or Redis
 * refused or lost the write): asked by whoever closes such a record — the job's next attempt, the
 * abandoned-run sweep — so that it ends `rebuilt`, naming its build, rather than `aborted` ("that
 * build may be published"). The claims Redis's published pointer names the run that published, or
 * (once a newer fence's publish moved it on) its list of recent publishes does; the output's
 * durable fence record must agree.
 */
import fs from "node:fs/promises";
import type { Redis } from "ioredis";
import { claimName, readListedPublish, readPublished } from "../claims";
import type { RedisKeys } from "../redis/keys";
import { publishedProof, UNKNOWN, UNPROVEN, type PublishProof } from "../runs/records";
import { settledWithin } from "../settled-within";
import { outputDirOf, tenantProblem, type Definitions } from "./definitions";
import { buildDirOf } from "./output";
import { listPublishedRun, readPublishedFence, recordPublishedFence } from "./published-fence";

/**
 * How long the claims Redis and the output's disk are waited for when asked whether a run
 * published (a read, and the fence record's write with its fsyncs): past it the answer is unknown.
 */
const PUBLISHED_BY_RUN_READ_MS = 5_000;

/**
 * Whether `run` published, for whoever closes its record instead of its attempt. Proven when the
 * claims Redis's published pointer names the run, this machine holds the build, and the output's
 * durable fence record holds that fence with that build — recorded here if it is not yet (the
 * publisher stopped before it, or the disk refused it), as repair would (repair.ts), so that a
 * claims Redis that loses the pointer later cannot take the publish back. Unproven: another
 * run's publish or none, a fence recorded with another build (the claims Redis granted it twice:
 * the attempt would have said "not published") or a higher one recorded (the claims Redis lost
 * newer publishes), a build this machine does not hold, a rebuild or tenant no longer defined.
 * Unknown: no answer within PUBLISHED_BY_RUN_READ_MS, or a Redis or disk error (a record that
 * was about to publish is then left to a later sweep).
 *
 * A publish the pointer no longer names (a newer fence published since: the run's worker stood
 * still or lost its final record meanwhile — the Sentinel soak saw one) is proven by the claims
 * Redis's list of recent publishes, which the publish pushed with its fence and build in the same
 * script, once the pointer is at a higher fence and the output's fence record holds a higher
 * fence too, or this very fence with this build: the run's build was published, then replaced,
 * as its own attempt would have said (`recordPublishedFence` "newer"). Unknown while the record
 * is lower (the newer publish's record is on its way, or repair writes it); unproven when the
 * record holds this fence with another build.
 */
export async function publishedByRun(
  deps: { claims: Pick<Redis, "hgetall" | "lrange">; keys: RedisKeys; definitions: Definitions },
  run: { runId: string; rebuild: string | null; tenant: string | null },
): Promise<PublishProof> {
  const definition = run.rebuild ? deps.definitions.rebuilds.get(run.rebuild) : undefined;
  const tenant = run.tenant || undefined;
  if (!definition || tenantProblem(definition, tenant)) return UNPROVEN;
  const name = claimName(definition.claimPath, tenant);
  const read = (async (): Promise<PublishProof> => {
    // A pointer a repair put back names no run.
    const pointer = await readPublished(deps.claims, deps.keys, name);
    const outputDir = outputDirOf(definition, tenant);
    if (pointer?.runId !== run.runId) {
      const listed = await readListedPublish(deps.claims, deps.keys, name, run.runId);
      if (!listed || !pointer || pointer.fence <= listed.fence) return UNPROVEN;
      const known = await readPublishedFence(outputDir);
      if (known?.fence === listed.fence && known.hash !== listed.value) return UNPROVEN;
      if (!known || known.fence < listed.fence) return UNKNOWN;
      // Listed beside the output before its record says rebuilt (its job ends on that record).
      await listPublishedRun(outputDir, { fence: listed.fence, hash: listed.value }, { runId: run.runId, ...listed });
      const proof = publishedProof({ fence: listed.fence, buildHash: listed.value, publishedAt: listed.publishedAt });
      return { kind: "proven", proof, idempotencyTtlMs: definition.idempotency.ttl, lane: name };
    }
    // Asynchronously: a hung disk must not stop the worker's event loop.
    const held = () =>
      fs.stat(buildDirOf(outputDir, pointer.value)).then(
        () => true,
        (error: NodeJS.ErrnoException) => {
          if (error.code === "ENOENT" || error.code === "ENOTDIR") return false;
          throw error;
        },
      );
    if (!(await held())) return UNPROVEN;
    // Its run listed with it (review helper-165: a job that ends on the rebuilt record this proof
    // gives must leave its publish where a Redis that brings the job back finds it); the version
    // and mark as the claims Redis's list keeps them. Not listed: a listing that fails is unknown.
    // (An entry a worker of an earlier version pushed has no fence: recorded without the run, as before.)
    const entry = await readListedPublish(deps.claims, deps.keys, name, run.runId);
    const recorded = await recordPublishedFence(
      outputDir,
      pointer.fence,
      pointer.value,
      entry?.fence === pointer.fence ? { runId: run.runId, version: entry.version, mark: entry.mark } : undefined,
    );
    if (recorded.status !== "recorded") return UNPROVEN;
    // Still here once its fence is recorded (pruning may have taken a build the pointer no longer
    // protected): else no machine could make it current.
    if (!(await held())) return UNPROVEN;
    const proof = publishedProof({ fence: pointer.fence, buildHash: pointer.value, publishedAt: pointer.publishedAt });
    return { kind: "proven", proof, idempotencyTtlMs: definition.idempotency.ttl, lane: name };
  })().catch((): PublishProof => UNKNOWN);
  return (await settledWithin(read, PUBLISHED_BY_RUN_READ_MS)) ? read : UNKNOWN;
}
