/**
 * Every Redis key claimwatch writes is built here, and nowhere else.
 *
 * All keys start with the hash tag `{prefix}`, so every key a Lua script touches lives in one
 * hash slot (Redis Cluster safe) and one prefix can be given to each test.
 * Names passed in (claim names, worker ids) must already be validated by their domain module;
 * this file only assembles strings.
 */
export type RedisKeys = ReturnType<typeof redisKeys>;

export function redisKeys(prefix: string) {
  const tag = `{${prefix}}`;
  return {
    /** The hash tag itself; BullMQ queues use it as their prefix so they share the slot. */
    tag,

    // --- workers -------------------------------------------------------------------------
    /** ZSET workerId → last heartbeat (ms since epoch). Pruned by score; never scanned. */
    workerRegistry: `${tag}:workers`,
    /** HASH of one worker's heartbeat (id, host, pid, startedAt, currentJob, version); has a TTL. */
    workerHeartbeat: (workerId: string) => `${tag}:worker:${workerId}`,

    // --- claims (in the claims Redis; see lib/claims) --------------------------------------
    /** STRING: the holder's token, `SET NX PX`. Its TTL is the claim's lifetime. */
    claim: (name: string) => `${tag}:claim:${name}`,
    /** HASH: the holder's metadata (token, fence, host, pid, job, run, times…); same TTL as `claim`. */
    claimMeta: (name: string) => `${tag}:claim-meta:${name}`,
    /**
     * STRING counter: the newest fencing token issued for a claim name. Never expires and is
     * never deleted — a counter that restarted at 1 would let a stale holder publish again.
     */
    claimFence: (name: string) => `${tag}:claim-fence:${name}`,
    /** ZSET of claim names, all at score 0 (ordered by name; paged with ZRANGEBYLEX). */
    claimRegistry: `${tag}:claims`,
    /** HASH claim name → consecutive skips; outlives the claim (read with or without one). */
    claimSkips: `${tag}:claim-skips`,
    /** HASH: what is published for a claim name now (fence, value, runId, publishedAt). */
    published: (name: string) => `${tag}:published:${name}`,

    // --- audit -----------------------------------------------------------------------------
    /** STREAM of operator actions, trimmed by MINID to the retention period. */
    auditLog: `${tag}:audit`,
  };
}
