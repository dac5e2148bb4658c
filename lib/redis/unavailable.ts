/**
 * Whether a Redis error means "away, or refusing writes for now: send it again": one rule for the
 * API (503 `unavailable`) and the CLI (exit 3). The worker's transient check (classify-failure.ts)
 * takes the same replies as "later" and reads them inside a discarded transaction the same way
 * (redisErrorMessages).
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

/**
 * Replies that mean "not now": a Sentinel group between primaries, a primary that lost its replicas
 * (min-replicas-to-write), one loading, a blocked command (WAIT) of a primary being demoted, memory
 * full under `noeviction` (OOM), snapshots failing with `stop-writes-on-bgsave-error` (MISCONF), a
 * long script (BUSY), a cluster moving slots.
 */
const LATER_REPLY = /^(NOREPLICAS|READONLY|MASTERDOWN|LOADING|UNBLOCKED|OOM|MISCONF|BUSY|TRYAGAIN|CLUSTERDOWN) /;

/** Redis's "not now" reply in an error (alone or inside a discarded transaction), cut to one short line; null when there is none. */
export function laterReply(error: unknown): string | null {
  const refusal = redisErrorMessages(error).find((message) => LATER_REPLY.test(message));
  if (!refusal) return null;
  const line = refusal.split("\n")[0]!.trim();
  return line.length > 160 ? `${line.slice(0, 159)}…` : line;
}

/**
 * What the API tells an operator: "unreachable" when Redis is away; its own reply when it answers
 * "not now" (memory full, snapshots failing, no replicas …).
 */
export function unavailableMessage(error: unknown): string {
  const later = laterReply(error);
  return later ? `Redis refuses this for now: ${later}; see /api/health` : "Redis is unreachable; see /api/health";
}

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
