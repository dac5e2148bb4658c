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
  const claimPrefix = `${tag}:claim:`;
  const claimMetaPrefix = `${tag}:claim-meta:`;
  const timelinePrefix = (rebuild?: string) => (rebuild ? `${tag}:tl:t:${rebuild}:` : `${tag}:tl:r:`);
  return {
    /** The hash tag itself; BullMQ queues use it as their prefix so they share the slot. */
    tag,

    // --- workers -------------------------------------------------------------------------
    /** ZSET workerId → last heartbeat (ms since epoch). Pruned by score; never scanned. */
    workerRegistry: `${tag}:workers`,
    /** HASH of one worker's heartbeat (id, host, pid, startedAt, currentJob, version); has a TTL. */
    workerHeartbeat: (workerId: string) => `${tag}:worker:${workerId}`,
    /** What `workerHeartbeat` puts before the id: for RUN_BEGIN, which asks a record's worker. */
    workerHeartbeatPrefix: `${tag}:worker:`,
    /**
     * STRING with a TTL: JSON {host, pid, problem} of the last worker start that refused its
     * definitions file; deleted by the next worker that starts (lib/workers/refusal.ts).
     */
    workerRefusal: `${tag}:worker-refusal`,

    // --- claims (in the claims Redis; see lib/claims) --------------------------------------
    /** STRING: the holder's token, `SET NX PX`. Its TTL is the claim's lifetime. */
    claim: (name: string) => `${claimPrefix}${name}`,
    /**
     * HASH: the holder's metadata (jobId, fence, ttlMs, refreshEveryMs, acquiredAt, refreshedAt,
     * holder identity as JSON); same TTL as `claim`, written and deleted with it.
     */
    claimMeta: (name: string) => `${claimMetaPrefix}${name}`,
    /**
     * What `claim` and `claimMeta` put before the name: for CLAIM_CENSUS_PAGE alone, which walks
     * the registry and builds those two keys itself (so a scrape does not send 20 000 key names).
     */
    claimKeyPrefixes: { claim: claimPrefix, claimMeta: claimMetaPrefix },
    /**
     * STRING counter: the newest fencing token issued for a claim name. Never expires and is
     * never deleted — a counter that restarted at 1 would let a stale holder publish again.
     */
    claimFence: (name: string) => `${tag}:claim-fence:${name}`,
    /** ZSET of claim names, all at score 0 (ordered by name; paged with ZRANGEBYLEX). */
    claimRegistry: `${tag}:claims`,
    /**
     * ZSET claim name → its `refreshedAt` (claims-server ms): written by the acquire and refresh
     * scripts, removed by release (and a force release that finds the claim gone), so the alert
     * evaluator reads only the claims not refreshed for a while, not every claim. An expired claim
     * leaves its entry behind (nothing runs when a key expires): readers check the claim itself and
     * drop such entries (CLAIM_REFRESHES_PRUNE). A score is never newer than the claim's refreshedAt.
     */
    claimRefreshes: `${tag}:claim-refreshes`,
    /** HASH claim name → consecutive skips; outlives the claim (read with or without one). */
    claimSkips: `${tag}:claim-skips`,
    /**
     * STREAM, capped (`MAXLEN ~`): what happened to one claim name — acquired, refreshed late,
     * released, expired without release, taken over, force-released, stopped after a force
     * release — written by the claim scripts themselves (lib/claims/trail.ts). Outlives the claim.
     */
    claimTrail: (name: string) => `${tag}:claim-trail:${name}`,
    /** STREAM, capped: claims that ended (released, expired, stopped, taken over), newest last. */
    claimsEnded: `${tag}:claims-ended`,
    /** HASH: what is published for a claim name now (fence, value, runId, publishedAt). */
    published: (name: string) => `${tag}:published:${name}`,
    /**
     * LIST, capped (newest first): "<run id> <version> <mark>" of the last publishes of a claim
     * name, pushed by the publish itself (FENCED_PUBLISH): a run of a job that published here is
     * known at once, before its fence reaches the disk's list (published-fence.ts).
     */
    publishedRuns: (name: string) => `${tag}:published-runs:${name}`,

    // --- access control (main Redis; see lib/auth) ---------------------------------------
    /** STRING counter with a TTL: mutations of one identity in the current window. */
    rateLimit: (action: string, identity: string) => `${tag}:rate:${action}:${identity}`,
    /** STRING counter with a TTL: recent failed logins (each one answers slower). */
    loginFailures: `${tag}:login-failures`,
    /** Refused API mutations of one actor ("anonymous" for callers without a valid token) in the current window (lib/api/handler.ts). */
    refusals: (actor: string) => `${tag}:refusals:${actor}`,
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
    /**
     * HASH "<rebuild>" or "<rebuild> <tenant>" → when a process last queued a job for it or
     * started with definitions that declare it (ms, its own clock: only shown): a worker whose
     * definitions lack the rebuild or tenant of a job keeps the job for a worker that knows it
     * (a rolling deploy) only when someone declared it (lib/rebuilds/declared.ts).
     */
    declaredTargets: `${tag}:declared-targets`,
    /** HASH: one run record (an attempt of a rebuild job), upserted by run id. */
    run: (runId: string) => `${tag}:run:${runId}`,
    /**
     * STRING with the record TTL: run id of the job's attempt in flight (set when an attempt
     * begins, deleted when it ends), so the next attempt closes exactly that one.
     */
    runOpenAttempt: (jobId: string) => `${tag}:run-open:${jobId}`,
    /**
     * STRING with a TTL (lib/operations/retry.ts): `{"jobId","requestId"}` of the job an operator's
     * Retry of this run queued, so its page says so and a second Retry while that job is pending
     * is refused.
     */
    retriedAs: (runId: string) => `${tag}:retried:${runId}`,
    /**
     * STRING with a TTL (lib/operations/retry.ts): `{"jobId","requestId","runId"}` of the newest
     * Retry of any attempt of this job, so a Retry of another attempt (one written after the first
     * Retry, e.g. the queue giving the job up) is refused while that retry is pending.
     */
    jobRetriedAs: (jobId: string) => `${tag}:retried-job:${jobId}`,
    /**
     * STRING counter with a TTL (lib/rebuilds/trigger.ts): requests that joined this waiting job
     * (deduplicated into it), so a cancel of the job says how many end with it.
     */
    joinedRequests: (jobId: string) => `${tag}:joined:${jobId}`,
    /**
     * STRING with the cancel request's TTL: an operator's cancel ended this job (removed it while it
     * waited, or its worker ended it cancelled); a resend of its request id is request-cancelled.
     */
    cancelEnded: (jobId: string) => `${tag}:cancel-ended:${jobId}`,
    /** STRING with a short TTL (lib/operations/retry.ts): one operator Retry of a job at a time. */
    retryLock: (jobId: string) => `${tag}:retrying:${jobId}`,
    /** LIST: the newest log lines of a run (capped). */
    runLog: (runId: string) => `${tag}:run-log:${runId}`,
    /**
     * ZSET runId → the attempt's start (Redis clock, ms): newest-first indexes of run records, one per filter a listing can
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
    /**
     * HASH per hour of run starts (the bucket's start, ms on the Redis clock): runs that reached a
     * final status, counted once by the record scripts when they do (lib/runs/timeline-counters.ts
     * has the field layout). Without `rebuild`: one lane per rebuild (tenants summed); with it: one
     * lane per tenant of that rebuild. PEXPIREAT the bucket's end + the record TTL.
     * The scripts append the bucket start to `timelineBucketPrefix` (only they know a run's start).
     */
    timelineBucketPrefix: timelinePrefix,
    timelineBucket: (bucketStart: number, rebuild?: string) => `${timelinePrefix(rebuild)}${bucketStart}`,
    /**
     * STRING, no TTL: the timeline backfill's cursor, an index score (ms) below which every run
     * record is final and counted in the timeline buckets; only ever raised
     * (lib/runs/timeline-backfill.ts).
     */
    timelineBackfill: `${tag}:tl:backfill`,
    /** STRING with a TTL: "this (rebuild, tenant, version) was rebuilt by run X". Key: sha256. */
    idempotency: (hash: string) => `${tag}:idem:${hash}`,
    /**
     * HASH with a TTL, of a lane — an output, named by its claim (`claimName`): `key` the one
     * idempotency key it marks rebuilt, `fence` the newest publish recorded, `building` the
     * idempotency key of the newest build begun (lib/runs/scripts.ts laneBegins, lanePublished): a
     * version counts as rebuilt only while the output serves it and no build of another version
     * has begun since. The output's, not the rebuild name's: two names for one output (a rename
     * deployed, or rolled back, while the other file's workers run) publish into one lane
     * (black-box helper-180: a lane per name kept a version marked that the other name had
     * published over).
     */
    rebuiltNow: (claim: string) => `${tag}:rebuilt-now:${claim}`,
    /** STRING: job id of a waiting trigger of (rebuild, tenant, version, force); collapses duplicates. */
    pendingTrigger: (rebuild: string, tenant: string | undefined, version: string | undefined, force: boolean) =>
      `${tag}:pending:${rebuild}:${tenant ?? ""}:${version ?? ""}:${force ? "force" : "plain"}`,
    /**
     * STRING with a TTL: job id queued for one "Rebuild now" request (a form submitted twice with
     * the same request id queues one job; lib/rebuilds/trigger). Key: sha256 of the caller and the
     * id, so a caller-chosen id never becomes a key name and one caller cannot answer another's.
     */
    triggerRequest: (hash: string) => `${tag}:trigger-request:${hash}`,
    /** STRING: what that request id stands for (its rebuild, tenant, version, force: hashed), as long as the id. */
    triggerRequestWhat: (hash: string) => `${tag}:trigger-request-what:${hash}`,
    /**
     * STRING (JSON: actor, reason, at, auditId) with a TTL: an operator asked to cancel this job.
     * Written by the API, read by the worker that runs the job (lib/operations/cancel); it outlives
     * the job's stay in a worker, so a job redelivered elsewhere is cancelled there.
     */
    cancelRequest: (jobId: string) => `${tag}:cancel:${jobId}`,
    /**
     * STRING with a TTL: the job a lost job's request was queued again as (worker/rebuild-worker.ts
     * `requeueIfLost`): a cancel of the lost job's id follows it (lib/operations/cancel).
     */
    requeuedAs: (jobId: string) => `${tag}:requeued-as:${jobId}`,
    /**
     * STRING (a random token) with a TTL: a trigger of the same (rebuild, tenant, version, force)
     * joined this waiting job (lib/rebuilds/trigger), a new token each time. A publish keeps the
     * token it saw beside the output: a run of the job that the queue's Redis brings back after
     * it published publishes again only when the token is another (a request joined since).
     */
    askedAgain: (jobId: string) => `${tag}:asked-again:${jobId}`,
    /**
     * STRING (JSON: reason, until) with a TTL: why a job was deferred when no run record says it
     * (another pickup of the attempt has the record; lib/rebuilds/defer-note). Read by the queue view.
     */
    deferNote: (jobId: string) => `${tag}:defer-note:${jobId}`,
    /**
     * HASH scheduler id → JSON (actor, reason, at): paused schedules. A paused scheduler is
     * removed from BullMQ and not upserted again until resumed (lib/rebuilds/schedules).
     */
    pausedSchedules: `${tag}:sched-paused`,
    /**
     * STRING with a TTL (kept by the workers whose definitions it names): a digest of the schedules
     * the definitions every live worker runs ask for (lib/rebuilds/schedules.ts `schedulesDigest`),
     * or "mixed" while workers of different definitions run: what the dashboard's next runs and
     * missed ticks go by (its own file's schedules, or the queue's schedulers).
     */
    scheduleDefinitions: `${tag}:sched-definitions`,
    /** HASH workerId → "<Redis ms> <schedules digest>": each worker's last note (lib/rebuilds/schedule-wants.ts). */
    scheduleWorkers: `${tag}:sched-workers`,
    /** HASH schedules digest → JSON scheduler id → spec key: what each noted file's schedules are. */
    scheduleWants: `${tag}:sched-wants`,
    /** STRING: when a scheduler was first upserted (ms); ticks before it cannot have been missed. */
    schedulerSince: (schedulerId: string) => `${tag}:sched-since:${schedulerId}`,
    /**
     * HASH build path → JSON of a published build found changed on disk (its bytes no longer
     * hash to its name): rebuild, tenant, expected, actual, foundAt, foundBy. Cleared when a later
     * check finds the build whole again or gone (lib/rebuilds/build-integrity).
     */
    changedBuilds: `${tag}:builds-changed`,
    /**
     * HASH "<host> <output dir>" → JSON of an output whose `current` lags behind its published
     * build because repair keeps failing there (a failing disk): since, at (last seen), reason,
     * fence, build. Written by each worker's repair, cleared once `current` follows
     * (lib/rebuilds/current-lag.ts). In the claims Redis, beside the pointers.
     */
    currentLagging: `${tag}:current-lagging`,
    /** STRING with a TTL: one worker re-hashes one output's `current` build per period. */
    buildCheckLease: (rebuild: string, tenant: string | undefined) => `${tag}:build-check:${rebuild}:${tenant ?? ""}`,
    /** ZSET runId → the scheduled tick it ran for (ms); a tick without a run is a missed one. */
    scheduleTicks: (rebuild: string, tenant: string | undefined) => `${tag}:ticks:${rebuild}:${tenant ?? ""}`,

    // --- alerts and metrics (see lib/alerts, lib/metrics) ----------------------------------
    /** STRING: the newest evaluator fence that committed alert state; older evaluators are refused. */
    alertsFence: `${tag}:alerts:fence`,
    /** STRING counter: bumped by every commit; a commit computed on an older version is refused. */
    alertsVersion: `${tag}:alerts:version`,
    /** HASH alert id → firing alert (JSON: labels, annotations, startsAt). */
    alertsFiring: `${tag}:alerts:firing`,
    /** HASH alert id → since when (ms) its condition holds, for rules with a `for` and no own clock. */
    alertsPending: `${tag}:alerts:pending`,
    /** STREAM of transitions (firing / resolved), capped. */
    alertsTransitions: `${tag}:alerts:transitions`,
    /** ZSET delivery id → sequence: deliveries not yet accepted by their receiver, oldest first. */
    alertsOutbox: `${tag}:alerts:outbox`,
    /** HASH delivery id → delivery (JSON: receiver, transition, attempts, nextAt, lastError). */
    alertsDeliveries: `${tag}:alerts:deliveries`,
    /** HASH receiver name → its last delivery (JSON: status, at, error, deliveryId). */
    alertsReceivers: `${tag}:alerts:receivers`,
    /** HASH "<rebuild>|<tenant>" → newest scheduled tick (ms) recorded as expected. */
    alertsTickCursor: `${tag}:alerts:tick-cursor`,
    /** ZSET tick (ms) → tick: the scheduled ticks of a rebuild (+ tenant) that were due, capped. */
    expectedTicks: (rebuild: string, tenant: string | undefined) => `${tag}:expected-ticks:${rebuild}:${tenant ?? ""}`,
    /**
     * HASH of counters and gauges that must survive restarts (main Redis): runs by status, the
     * run-duration histogram, last success, missed ticks. Field layout: lib/metrics/counters.ts.
     */
    metricsCounters: `${tag}:metrics`,
    /** HASH of claim counters (claims Redis): takeovers and fencing rejections per claim. */
    claimCounters: `${tag}:claim-counters`,
    /** STREAM of claim takeovers (claims Redis), capped: the `takeover` alert reads it. */
    claimTakeovers: `${tag}:claim-takeovers`,
  };
}
