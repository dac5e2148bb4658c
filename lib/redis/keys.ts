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
    /**
     * HASH: the holder's metadata (jobId, fence, ttlMs, refreshEveryMs, acquiredAt, refreshedAt,
     * holder identity as JSON); same TTL as `claim`, written and deleted with it.
     */
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

    // --- access control (main Redis; see lib/auth) ---------------------------------------
    /** STRING counter with a TTL: mutations of one identity in the current window. */
    rateLimit: (action: string, identity: string) => `${tag}:rate:${action}:${identity}`,
    /** STRING counter with a TTL: recent failed logins (each one answers slower). */
    loginFailures: `${tag}:login-failures`,
    /** STRING, PX until the session would expire: a logged-out session id (lib/auth/session). */
    revokedSession: (sid: string) => `${tag}:session-revoked:${sid}`,

    // --- live events (see lib/events) ------------------------------------------------------
    /**
     * STREAM of what changed, capped (`XADD MAXLEN ~`), read by each web server's one reader and
     * pushed to browsers over SSE; entry ids are the resume points (`Last-Event-ID`). There is
     * one in each Redis: claim events next to the claims (claims Redis), run and worker events
     * next to the runs (main Redis), each written by the process that made the change.
     */
    events: `${tag}:events`,

    // --- audit -----------------------------------------------------------------------------
    /** STREAM of operator actions, trimmed by MINID to the retention period. */
    auditLog: `${tag}:audit`,
    // --- runs and rebuilds (main Redis; see lib/runs, lib/rebuilds) ----------------------
    /** HASH: one run record (an attempt of a rebuild job), upserted by run id. */
    run: (runId: string) => `${tag}:run:${runId}`,
    /** LIST: the newest log lines of a run (capped). */
    runLog: (runId: string) => `${tag}:run-log:${runId}`,
    /**
     * ZSET runId → createdAt: newest-first indexes of run records, one per filter a listing can
     * ask for — all runs, a rebuild, a rebuild's tenant, and each of these by status (a run moves
     * between status indexes) — so every listing reads one index: O(page).
     */
    runIndex: (filter: { rebuild?: string; tenant?: string; status?: string } = {}) => {
      const { rebuild, tenant, status } = filter;
      if (rebuild && tenant)
        return status ? `${tag}:runs:rts:${rebuild}:${tenant}:${status}` : `${tag}:runs:rt:${rebuild}:${tenant}`;
      if (rebuild) return status ? `${tag}:runs:rs:${rebuild}:${status}` : `${tag}:runs:r:${rebuild}`;
      return status ? `${tag}:runs:s:${status}` : `${tag}:runs`;
    },
    /** STRING with a TTL: "this (rebuild, tenant, version) was rebuilt by run X". Key: sha256. */
    idempotency: (hash: string) => `${tag}:idem:${hash}`,
    /** STRING: job id of a waiting trigger of (rebuild, tenant, version, force); collapses duplicates. */
    pendingTrigger: (rebuild: string, tenant: string | undefined, version: string | undefined, force: boolean) =>
      `${tag}:pending:${rebuild}:${tenant ?? ""}:${version ?? ""}:${force ? "force" : "plain"}`,
    /** STRING: when a scheduler was first upserted (ms); ticks before it cannot have been missed. */
    schedulerSince: (schedulerId: string) => `${tag}:sched-since:${schedulerId}`,
    /** ZSET runId → the scheduled tick it ran for (ms); a tick without a run is a missed one. */
    scheduleTicks: (rebuild: string, tenant: string | undefined) => `${tag}:ticks:${rebuild}:${tenant ?? ""}`,
  };
}
