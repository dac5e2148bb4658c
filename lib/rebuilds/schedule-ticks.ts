/**
 * Schedule bookkeeping: a scheduled tick counts as served as soon as a worker picks its job up —
 * whether the run then rebuilds, skips or waits — so the banner's "missed tick" means that no
 * worker ran it at all. Ticks older than the run retention are dropped on the way (one entry per
 * tick otherwise).
 */
import type { Redis } from "ioredis";
import type { RedisKeys } from "../redis/keys";
import { scheduledTickOf } from "./queue";

/** Records the tick of a scheduler job (one round trip); resolves at once for any other job. */
export async function recordScheduledTick(
  client: Pick<Redis, "multi">,
  keys: RedisKeys,
  job: { id: string; rebuild: string; tenant: string | undefined },
  keepMs: number,
): Promise<void> {
  const tick = scheduledTickOf(job.id);
  if (!tick) return;
  const key = keys.scheduleTicks(job.rebuild, job.tenant);
  await client
    .multi()
    .zadd(key, "NX", tick.tickAt, job.id)
    .zremrangebyscore(key, "-inf", tick.tickAt - keepMs)
    .exec();
}
