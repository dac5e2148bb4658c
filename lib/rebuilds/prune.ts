/**
 * Pruning old builds under the output's claim. Every promote and fenced publish happens under
 * that claim, so a prune that holds it cannot delete a build a run is about to publish (a run
 * that reproduced an existing hash drops its own copy and publishes the old one); and the Redis
 * pointer's build is kept, read under the same claim, whatever `current` says (a late stale swap
 * may point it elsewhere). An output whose claim is held is skipped: the next heartbeat prunes it.
 */
import type { Redis } from "ioredis";
import { claimName, readPublished, withClaim } from "../claims";
import type { RedisKeys } from "../redis/keys";
import type { ScriptingClient } from "../redis/scripts";
import { outputDirOf, tenantsOf, type Definitions } from "./definitions";
import { pruneBuilds } from "./output";
import { readFenceFloor, readPublishedFence } from "./published-fence";

/** Long enough for the renames of one output's old builds; short, because a run that finds the claim held waits about this long. */
const PRUNE_CLAIM = { ttlMs: 5_000, refreshEveryMs: 2_000 } as const;

/** The `version` a pruner's claim carries: a run that finds it waits a moment instead of deferring. */
export const PRUNING_VERSION = "(pruning builds)";

export interface PruneClaims {
  client: ScriptingClient & Pick<Redis, "hgetall">;
  keys: RedisKeys;
  workerId?: string;
  /** Asked before each output: true once the worker is stopping (the outputs left wait for the next prune). */
  stopping?: () => boolean;
}

/**
 * Removes old builds of every output, keeping `current`, the published build and
 * `retention.builds` more. Returns what it did per output (removed builds, or why it skipped).
 */
export async function pruneOldBuilds(definitions: Definitions, claims: PruneClaims): Promise<string[]> {
  const report: string[] = [];
  for (const rebuild of definitions.rebuilds.values()) {
    for (const tenant of tenantsOf(rebuild)) {
      if (claims.stopping?.()) return report;
      const outputDir = outputDirOf(rebuild, tenant);
      const name = claimName(rebuild.claimPath, tenant);
      try {
        const fenceFloor = await readFenceFloor(outputDir);
        const result = await withClaim(
          claims.client,
          claims.keys,
          name,
          {
            workerId: claims.workerId ?? "",
            rebuild: rebuild.name,
            tenant: tenant ?? "",
            version: PRUNING_VERSION,
            // Housekeeping every minute: the output's trail is for its runs.
            trail: false,
          },
          async (held) => {
            // Without the pointer the published build is unknown: nothing is removed.
            const published = await readPublished(claims.client, claims.keys, name);
            // And the disk record's build: a claims Redis that lost writes may point lower until
            // repair puts the pointer back on it.
            const recorded = await readPublishedFence(outputDir);
            return pruneBuilds(outputDir, definitions.retention.builds, {
              protect: [published?.value, recorded?.hash].filter((hash): hash is string => !!hash),
              beforeRemove: () => held.throwIfLost(),
            });
          },
          { ...PRUNE_CLAIM, ...(fenceFloor > 0 ? { fenceFloor } : {}) },
        );
        if (result.status === "held") report.push(`${outputDir}: claim held, pruned later`);
        else if (result.value.length) report.push(`${outputDir}: pruned ${result.value.join(", ")}`);
      } catch (error) {
        // One output that cannot be pruned (Redis away, a permission, a vanished disk) must not stop the others.
        report.push(`${outputDir}: not pruned: ${String(error)}`);
      }
    }
  }
  return report;
}
