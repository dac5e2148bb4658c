/**
 * Whether a Redis error means "away, or refusing writes for now: send it again": one rule for the
 * API (503 `unavailable`) and the CLI (exit 3). The worker's transient check (classify-failure.ts)
 * takes the same replies as "later" and reads them inside a discarded transaction the same way
 * (allRepliesSay).
 */

/**
 * The replies that decide what an error means: for a transaction Redis discarded (EXECABORT) the
 * errors that made it (ioredis `previousErrors`: NOREPLICAS inside a MULTI comes back so;
 * black-box helper-121), else the error's own message.
 */
export function decidingReplies(error: unknown): string[] {
  if (!(error instanceof Error)) return [];
  const previous = (error as { previousErrors?: unknown }).previousErrors;
  const inner = Array.isArray(previous) ? previous.filter((e): e is Error => e instanceof Error) : [];
  return inner.length > 0 ? inner.map((e) => e.message) : [error.message];
}

/**
 * Whether every deciding reply says "later": a transaction discarded for NOREPLICAS and a
 * wrong-type error at once is that error, not a Redis to wait for.
 */
export function allRepliesSay(error: unknown, later: RegExp): boolean {
  const replies = decidingReplies(error);
  return replies.length > 0 && replies.every((reply) => later.test(reply));
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
  if (!allRepliesSay(error, LATER_REPLY)) return null;
  const refusal = decidingReplies(error)[0]!;
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
  const message = error instanceof Error ? error.message : "";
  return (
    name === "RedisNotConfiguredError" ||
    /Redis|ECONNREFUSED|Connection|Command timed out|Stream isn't writeable|MaxRetriesPerRequest|max retries per request/i.test(
      `${name} ${message}`,
    ) ||
    allRepliesSay(error, LATER_REPLY)
  );
}
