/**
 * Consecutive skips per claim name. A skip is a normal outcome, but one that repeats means
 * either a genuinely long run or a stale claim; the count makes the difference visible before
 * it becomes an incident. Kept in one hash that outlives claims, so it is readable with or
 * without a current holder. Bounded by the number of distinct claim names.
 */
import type { Redis } from "ioredis";
import type { RedisKeys } from "../redis/keys";

/** Counts one more skip (the claim was held by someone else); returns the new count. */
export function recordSkip(client: Pick<Redis, "hincrby">, keys: RedisKeys, name: string): Promise<number> {
  return client.hincrby(keys.claimSkips, name, 1);
}

/** Resets the count after a completed rebuild. */
export async function resetSkips(client: Pick<Redis, "hdel">, keys: RedisKeys, name: string): Promise<void> {
  await client.hdel(keys.claimSkips, name);
}

export async function readSkips(client: Pick<Redis, "hget">, keys: RedisKeys, name: string): Promise<number> {
  return Number((await client.hget(keys.claimSkips, name)) ?? 0);
}

/** Counts for many names in one HMGET; names never skipped count 0. */
export async function readSkipsMany(
  client: Pick<Redis, "hmget">,
  keys: RedisKeys,
  names: readonly string[],
): Promise<Map<string, number>> {
  const counts = new Map<string, number>();
  if (names.length === 0) return counts;
  const values = await client.hmget(keys.claimSkips, ...names);
  names.forEach((name, i) => counts.set(name, Number(values[i] ?? 0)));
  return counts;
}
