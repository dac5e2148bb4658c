/**
 * Whether a Redis error means "away, or refusing writes for now: send it again": one rule for the
 * API (503 `unavailable`) and the CLI (exit 3). The worker's transient check (classify-failure.ts)
 * takes more replies as "later" (OOM, MISCONF, BUSY …) and reads the same errors inside a
 * discarded transaction (redisErrorMessages).
 */

/**
 * The messages of an error: its own, and for a transaction Redis discarded (EXECABORT) those of the
 * errors that made it (ioredis `previousErrors`: NOREPLICAS inside a MULTI comes back so;
 * black-box helper-121).
 */
export function redisErrorMessages(error: unknown): string[] {
  if (!(error instanceof Error)) return [];
  const previous = (error as { previousErrors?: unknown }).previousErrors;
  const inner = Array.isArray(previous) ? previous.filter((e): e is Error => e instanceof Error) : [];
  return [error.message, ...inner.map((e) => e.message)];
}

/** A Sentinel group between primaries, a primary that lost its replicas (min-replicas-to-write), one loading, a blocked command (WAIT) of a primary being demoted. */
const LATER_REPLY = /^(NOREPLICAS|READONLY|MASTERDOWN|LOADING|UNBLOCKED) /;

/** Redis away (no connection, a timeout, retries spent) or answering "not now": the caller may send it again. */
export function isRedisUnavailable(error: unknown): boolean {
  const name = error instanceof Error ? error.name : "";
  const messages = redisErrorMessages(error);
  return (
    name === "RedisNotConfiguredError" ||
    /Redis|ECONNREFUSED|Connection|Command timed out|Stream isn't writeable|MaxRetriesPerRequest|max retries per request/i.test(
      `${name} ${messages[0] ?? ""}`,
    ) ||
    messages.some((message) => LATER_REPLY.test(message))
  );
}
