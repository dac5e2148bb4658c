/**
 * Retention of run records: by count per rebuild (and tenant) and by age, oldest start first.
 * A record still queued or running is never trimmed (its attempt would write into a hole, and
 * the Claims page links to it): the script skips it, so trimming stays behind by at most the runs
 * in flight. An aborted one leaves the listings when its turn comes, but its hash stays for an
 * hour after it ended (ABORTED_KEPT_MS). Bounded work per call (`batch`); every worker runs it now
 * and then.
 */
import type { Redis } from "ioredis";
import type { RedisKeys } from "../redis/keys";
import { RUN_REPLY } from "../redis/replies";
import { queueVariadicScript, scriptPipeline, type ScriptingPipelineClient } from "../redis/scripts";
import { serverNow } from "../redis/time";
import { DEFAULT_RETENTION, indexLayout, runPlaceOf, type RunRetention } from "./records";
import { RUN_TRIM } from "./scripts";

/**
 * An aborted record's hash is kept this long after it finished, beyond the count (RUN_TRIM): a
 * pickup whose record was closed under it (paused past its heartbeat) must find it final when it
 * wakes, not gone. Out of the listings all the same: trimmed newer runs never leave an older
 * abort as the rebuild's last run.
 */
export const ABORTED_KEPT_MS = 3_600_000;

type TrimClient = ScriptingPipelineClient & Pick<Redis, "zrangebyscore" | "zrange" | "zcard" | "time">;

export interface TrimOptions {
  rebuild: string;
  tenant: string | null;
  retention?: RunRetention;
  /** Records looked at per call. */
  batch?: number;
}

/** Trims one rebuild's (or rebuild and tenant's) records; returns how many were deleted. */
export async function trimRuns(client: TrimClient, keys: RedisKeys, options: TrimOptions): Promise<number> {
  const retention = options.retention ?? DEFAULT_RETENTION;
  const batch = options.batch ?? 500;
  const index = keys.runIndex(
    options.tenant ? { rebuild: options.rebuild, tenant: options.tenant } : { rebuild: options.rebuild },
  );
  const now = await serverNow(client);
  const old = await client.zrangebyscore(index, "-inf", now - retention.maxAgeMs, "LIMIT", 0, batch);
  const excess = Math.min(batch, Math.max(0, (await client.zcard(index)) - retention.maxPerRebuild));
  const overflow = excess > 0 ? await client.zrange(index, "0", String(excess - 1)) : [];
  const victims = [...new Set([...old, ...overflow])];
  if (victims.length === 0) return 0;

  const lookup = client.pipeline();
  for (const id of victims) lookup.hget(keys.run(id), "tenant");
  const replies = (await lookup.exec()) ?? [];
  const pipeline = scriptPipeline(client, [RUN_TRIM]);
  victims.forEach((id, i) => {
    // A record whose hash already expired has no fields left: the index it was found in says its tenant.
    const tenant = (replies[i]?.[1] as string | null | undefined) || options.tenant;
    const layout = indexLayout(keys, runPlaceOf(options.rebuild, tenant));
    queueVariadicScript(pipeline, RUN_TRIM, [keys.run(id), keys.runLog(id)], layout.keys, [
      id,
      layout.n,
      layout.statuses,
      ABORTED_KEPT_MS,
    ]);
  });
  const results = (await pipeline.exec()) ?? [];
  return results.filter(([, reply]) => reply === RUN_REPLY.written).length;
}

/** Trims every rebuild's (and tenant's) run records; run by each worker on its heartbeat. */
export async function trimAllRuns(
  client: TrimClient,
  keys: RedisKeys,
  definitions: { rebuilds: Map<string, { name: string; tenants?: string[] | undefined }> },
  retention: RunRetention = DEFAULT_RETENTION,
): Promise<number> {
  let removed = 0;
  for (const rebuild of definitions.rebuilds.values()) {
    // `runs` is per tenant where there are tenants: one tenant's many runs never trim another's
    // few. Each tenant first; then the rebuild as a whole keeps that many per tenant (records of
    // tenants no longer defined stay bounded), and the age limit.
    for (const tenant of rebuild.tenants ?? [])
      removed += await trimRuns(client, keys, { rebuild: rebuild.name, tenant, retention });
    const tenants = rebuild.tenants?.length ?? 0;
    const whole = tenants > 0 ? { ...retention, maxPerRebuild: retention.maxPerRebuild * tenants } : retention;
    removed += await trimRuns(client, keys, { rebuild: rebuild.name, tenant: null, retention: whole });
  }
  return removed;
}
