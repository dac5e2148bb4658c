/** Fixed-window rate limits per identity and action (INCR + PEXPIRE NX): one round trip. */
import type { Redis } from "ioredis";
import type { RedisKeys } from "../redis/keys";

export interface Limit {
  max: number;
  windowMs: number;
}

/** Triggers and releases: generous for a person, a wall for a runaway script. */
export const MUTATION_LIMIT: Limit = { max: 30, windowMs: 60_000 };

export async function takeToken(
  client: Pick<Redis, "multi">,
  keys: RedisKeys,
  action: string,
  identity: string,
  limit: Limit = MUTATION_LIMIT,
): Promise<{ allowed: true } | { allowed: false; retryAfterMs: number }> {
  const key = keys.rateLimit(action, identity);
  const replies = (await client.multi().incr(key).pexpire(key, limit.windowMs, "NX").pttl(key).exec()) ?? [];
  const count = Number(replies[0]?.[1] ?? 0);
  const ttl = Number(replies[2]?.[1] ?? limit.windowMs);
  return count <= limit.max ? { allowed: true } : { allowed: false, retryAfterMs: Math.max(1, ttl) };
}
