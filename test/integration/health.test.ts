import assert from "node:assert/strict";
import { test } from "node:test";
import { createRedis, closeRedis } from "../../lib/redis/client";
import { redisKeys } from "../../lib/redis/keys";
import { checkHealth } from "../../lib/health/health";
import { inspectRedis, safetyProblems, triggerReplicaProblems } from "../../lib/health/redis-safety";
import { beat, listLiveWorkersAt, newWorkerIdentity, retire } from "../../lib/workers/heartbeat";
import { startTestRedis, stopTestRedis, uniquePrefix } from "../support/redis";

test("a safe Redis: reachable, noeviction, AOF; live workers are counted", async () => {
  const server = await startTestRedis();
  const client = createRedis(server.url, "probe");
  const keys = redisKeys(uniquePrefix());
  try {
    const before = await checkHealth({ main: client, claims: client, keys });
    assert.equal(before.ok, true);
    assert.deepEqual(before.redis, {
      ok: true,
      version: before.redis.ok ? before.redis.version : "",
      evictionPolicy: "noeviction",
      persistence: "aof",
      durability: {
        level: "lossy",
        detail: "AOF with appendfsync everysec: a crash loses about the last second of writes",
        replicasInSync: 0,
      },
    });
    assert.match(before.redis.ok ? before.redis.version : "", /^\d+\.\d+/);
    assert.equal(before.workers, 0);
    assert.deepEqual(before.problems, ["No worker is running: rebuilds will wait in the queue"]);

    const worker = newWorkerIdentity("test");
    await beat(client, keys, worker, null);
    const during = await checkHealth({ main: client, claims: client, keys });
    assert.equal(during.workers, 1);
    assert.deepEqual(during.problems, []);

    await retire(client, keys, worker.id);
    const retired = await checkHealth({ main: client, claims: client, keys });
    assert.equal(retired.workers, 0);
    assert.deepEqual(retired.problems, ["No worker is running: rebuilds will wait in the queue"], "a clean stop");

    // One that stopped beating without retiring (paused, killed): its last beat 40 s ago (its
    // heartbeat hash expired with it). Named in the problem and listed as silent.
    const paused = newWorkerIdentity("test");
    await beat(client, keys, paused, null);
    const [seconds] = await client.time();
    await client.zadd(keys.workerRegistry, Number(seconds) * 1000 - 40_000, paused.id);
    await client.del(keys.workerHeartbeat(paused.id));
    const silent = await checkHealth({ main: client, claims: client, keys });
    assert.equal(silent.workers, 0);
    assert.match(
      silent.problems[0] ?? "",
      new RegExp(
        `^No worker is running: rebuilds will wait in the queue\\. Worker ${paused.id} stopped beating 4\\d s ago without shutting down: paused`,
      ),
    );
    const listed = await listLiveWorkersAt(client, keys);
    assert.deepEqual(
      listed.silent.map((w) => w.id),
      [paused.id],
    );
  } finally {
    await closeRedis(client);
    await stopTestRedis(server);
  }
});

test("eviction and missing persistence are reported as problems, not as outages", async () => {
  const server = await startTestRedis(["--maxmemory-policy", "allkeys-lru", "--appendonly", "no", "--save", ""]);
  const client = createRedis(server.url, "probe");
  try {
    const report = await checkHealth({ main: client, claims: client, keys: redisKeys(uniquePrefix()) });
    assert.equal(report.ok, true);
    assert.deepEqual(report.redis, {
      ok: true,
      version: report.redis.ok ? report.redis.version : "",
      evictionPolicy: "allkeys-lru",
      persistence: "none",
      durability: { level: "lossy", detail: "no persistence: a restart loses everything", replicasInSync: 0 },
    });
    assert.ok(
      report.problems.some((p) => p.includes("locks can be evicted under memory pressure")),
      report.problems.join("; "),
    );
    assert.ok(
      report.problems.some((p) => p.includes("no persistence")),
      report.problems.join("; "),
    );
  } finally {
    await closeRedis(client);
  }
});

test("a separate claims Redis that evicts is named as the claims Redis; the safe main Redis is not blamed", async () => {
  const main = await startTestRedis();
  const claimsServer = await startTestRedis(["--maxmemory-policy", "allkeys-lru"]);
  const mainClient = createRedis(main.url, "probe");
  const claimsClient = createRedis(claimsServer.url, "probe");
  try {
    const report = await checkHealth({ main: mainClient, claims: claimsClient, keys: redisKeys(uniquePrefix()) });
    assert.equal(report.redis.ok && report.redis.evictionPolicy, "noeviction");
    assert.equal(report.claimsRedis.ok && report.claimsRedis.evictionPolicy, "allkeys-lru");
    assert.ok(
      report.problems.includes(
        "Claims Redis uses maxmemory-policy allkeys-lru: locks can be evicted under memory pressure (set noeviction)",
      ),
      report.problems.join("; "),
    );
    assert.ok(!report.problems.some((p) => p.startsWith("Redis uses")), report.problems.join("; "));
  } finally {
    await closeRedis(mainClient);
    await closeRedis(claimsClient);
    await stopTestRedis(main);
    await stopTestRedis(claimsServer);
  }
});

test("RDB-only persistence is reported as rdb", async () => {
  const server = await startTestRedis(["--appendonly", "no", "--save", "900 1"]);
  const client = createRedis(server.url, "probe");
  try {
    const safety = await inspectRedis(client);
    assert.equal(safety.ok && safety.persistence, "rdb");
    assert.equal(safety.ok && safety.durability.level, "lossy");
    assert.match(safety.ok ? safety.durability.detail : "", /^RDB snapshots only/);
  } finally {
    await closeRedis(client);
  }
});

test("claims durability: appendfsync always is durable; min-replicas-to-write counts as replicated; a replica is flagged", async () => {
  const always = await startTestRedis(["--appendfsync", "always"]);
  const replicated = await startTestRedis(["--min-replicas-to-write", "1"]);
  const replica = await startTestRedis(["--replicaof", "127.0.0.1", String(replicated.port)]);
  const clients = [always, replicated, replica].map((server) => createRedis(server.url, "probe"));
  try {
    const [a, r, s] = await Promise.all(clients.map((client) => inspectRedis(client)));
    assert.deepEqual(a!.ok && a!.durability, {
      level: "durable",
      detail: "AOF with appendfsync always",
      replicasInSync: 0,
    });
    assert.equal(r!.ok && r!.durability.level, "replicated");
    assert.deepEqual(s!.ok && s!.durability, {
      level: "lossy",
      detail: "a replica (read-only): claims must go to the primary",
      replicasInSync: 0,
    });
  } finally {
    for (const client of clients) await closeRedis(client);
  }
});

test("a primary with replicas (as Sentinel manages): asynchronous replicas said; min-replicas counts good replicas and flags NOREPLICAS", async () => {
  const plain = await startTestRedis();
  const plainReplica = await startTestRedis(["--replicaof", "127.0.0.1", String(plain.port)]);
  const bounded = await startTestRedis(["--min-replicas-to-write", "1", "--min-replicas-max-lag", "1"]);
  const boundedReplica = await startTestRedis(["--replicaof", "127.0.0.1", String(bounded.port)]);
  const [plainClient, boundedClient] = [plain, bounded].map((server) => createRedis(server.url, "probe"));
  const until = async <T>(probe: () => Promise<T | null>): Promise<T> => {
    for (let i = 0; i < 100; i++) {
      const value = await probe();
      if (value !== null) return value;
      await new Promise((r) => setTimeout(r, 200));
    }
    throw new Error("not within 20 s");
  };
  try {
    const asyncOnly = await until(async () => {
      const safety = await inspectRedis(plainClient!);
      // Connected first, in sync once its initial sync is done.
      return safety.ok &&
        safety.durability.detail.includes("1 asynchronous replica(s)") &&
        safety.durability.replicasInSync === 1
        ? safety
        : null;
    });
    assert.equal(asyncOnly.ok && asyncOnly.durability.level, "lossy");
    // CLAIMWATCH_TRIGGER_REPLICAS asking more than that cannot be met, and the report says so.
    assert.deepEqual(triggerReplicaProblems(asyncOnly, 1), []);
    assert.equal(triggerReplicaProblems(asyncOnly, 0).length, 0);
    assert.match(
      triggerReplicaProblems(asyncOnly, 2).join(),
      /^CLAIMWATCH_TRIGGER_REPLICAS is 2, but the main Redis has 1 replica\(s\) in sync: every rebuild request is answered 503 not-replicated/,
    );
    assert.match(
      asyncOnly.ok ? asyncOnly.durability.detail : "",
      /a failover may lose the writes they had not received/,
    );

    const inSync = await until(async () => {
      const safety = await inspectRedis(boundedClient!);
      return safety.ok && safety.durability.detail.includes("(1 of 1 replica(s) good now)") ? safety : null;
    });
    assert.equal(inSync.ok && inSync.durability.level, "replicated");
    assert.match(inSync.ok ? inSync.durability.detail : "", /^min-replicas-to-write 1, max lag 1 s/);
    assert.deepEqual(safetyProblems("Claims Redis", inSync), []);

    await stopTestRedis(boundedReplica);
    const refusing = await until(async () => {
      const safety = await inspectRedis(boundedClient!);
      return safety.ok && safety.durability.problem ? safety : null;
    });
    assert.equal(refusing.ok && refusing.durability.replicasInSync, 0);
    assert.deepEqual(safetyProblems("Claims Redis", refusing), [
      "Claims Redis: only 0 of the 1 replica(s) min-replicas-to-write asks for are in sync: every write is refused (NOREPLICAS)",
    ]);
    await assert.rejects(boundedClient!.set("k", "v"), /NOREPLICAS/);
  } finally {
    await closeRedis(plainClient);
    await closeRedis(boundedClient);
    await stopTestRedis(plainReplica);
  }
});

test("managed Redis with CONFIG disabled: persistence unknown, eviction policy still read from INFO", async () => {
  const server = await startTestRedis(["--appendonly", "no", "--rename-command", "CONFIG", ""]);
  const client = createRedis(server.url, "probe");
  try {
    const safety = await inspectRedis(client);
    assert.deepEqual(safety, {
      ok: true,
      version: safety.ok ? safety.version : "",
      evictionPolicy: "noeviction",
      persistence: "unknown",
      durability: {
        level: "unknown",
        detail: "unknown (CONFIG refused: appendfsync and replicas cannot be read)",
        replicasInSync: 0,
      },
    });
  } finally {
    await closeRedis(client);
  }
});

test("a stopped Redis and a frozen (SIGSTOP) Redis both answer ok:false promptly, never hang", async () => {
  const stopped = await startTestRedis();
  const frozen = await startTestRedis();
  const stoppedClient = createRedis(stopped.url, "probe");
  const frozenClient = createRedis(frozen.url, "probe");
  const keys = redisKeys(uniquePrefix());
  try {
    await stoppedClient.ping();
    await frozenClient.ping();
    await stopTestRedis(stopped);
    process.kill(frozen.pid, "SIGSTOP");

    const started = performance.now();
    const report = await checkHealth({ main: stoppedClient, claims: frozenClient, keys });
    const elapsed = performance.now() - started;
    assert.equal(report.ok, false);
    assert.equal(report.redis.ok, false);
    assert.equal(report.claimsRedis.ok, false);
    assert.equal(report.workers, null);
    assert.ok(report.problems[0]?.startsWith("Redis is unreachable"), report.problems.join("; "));
    // The deadline is 1.8 s; the bound here only catches a hang, it is not a latency goal.
    assert.ok(elapsed < 5_000, `health took ${elapsed} ms`);
  } finally {
    process.kill(frozen.pid, "SIGCONT");
    await closeRedis(stoppedClient);
    await closeRedis(frozenClient);
  }
});
