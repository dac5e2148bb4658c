/**
 * Acquire, takeover, refresh and release against a real redis-server: every branch of the
 * acquire, refresh and release scripts, and mutual exclusion under concurrent acquirers.
 */
import assert from "node:assert/strict";
import os from "node:os";
import { after, test } from "node:test";
import { Redis } from "ioredis";
import { acquireClaim, claimName, refreshClaim, releaseClaim, type AcquireResult } from "../../lib/claims/index";
import { createRedis } from "../../lib/redis/client";
import { redisKeys } from "../../lib/redis/keys";
import { CLAIM_ACQUIRE, registerScripts } from "../../lib/redis/scripts";
import { startTestRedis, uniquePrefix } from "../support/redis";

const server = await startTestRedis();
const client = createRedis(server.url, "worker");
after(() => client.disconnect());

const timing = { ttlMs: 5_000, refreshEveryMs: 1_000 };

function acquired(result: AcquireResult): Extract<AcquireResult, { status: "acquired" }> {
  assert.equal(result.status, "acquired", `expected acquired, got ${JSON.stringify(result)}`);
  return result as Extract<AcquireResult, { status: "acquired" }>;
}

for (const contenders of [2, 20]) {
  test(`${contenders} concurrent acquirers of one name: exactly one wins, 1000 times; fences rise`, async () => {
    const keys = redisKeys(uniquePrefix("race"));
    const name = claimName("builds/race");
    const clients = Array.from({ length: contenders }, () => new Redis(server.url));
    try {
      await Promise.all(clients.map((c) => c.ping()));
      let lastFence = 0;
      for (let trial = 0; trial < 1_000; trial++) {
        const results = await Promise.all(
          clients.map((c, i) => acquireClaim(c, keys, name, { jobId: `job-${trial}-${i}` }, timing)),
        );
        const winners = results.filter((r) => r.status === "acquired");
        assert.equal(winners.length, 1, `trial ${trial}: ${winners.length} winners`);
        const winner = acquired(winners[0]!);
        assert.ok(winner.fence > lastFence, `trial ${trial}: fence ${winner.fence} after ${lastFence}`);
        lastFence = winner.fence;
        for (const loser of results.filter((r) => r.status === "held")) {
          assert.equal(loser.status === "held" && loser.holder.fence, winner.fence);
        }
        assert.deepEqual(await releaseClaim(client, keys, name, winner.token), { status: "released" });
      }
      assert.equal(lastFence, 1_000);
    } finally {
      clients.forEach((c) => c.disconnect());
    }
  });
}

test("acquire writes token, fence, metadata and registry entry in one script", async () => {
  const keys = redisKeys(uniquePrefix());
  const name = claimName("builds/meta", "acme");
  const meta = { workerId: "w-1", jobId: "j-1", runId: "r-1", rebuild: "incidents", tenant: "acme", version: "1.2.3" };
  const grant = acquired(await acquireClaim(client, keys, name, meta, timing));
  assert.match(grant.token, /^[^:]+:\d+:[0-9a-f]{32}$/);
  assert.equal(grant.fence, 1);
  assert.equal(grant.tookOverFrom, null);

  assert.equal(await client.get(keys.claim(name)), grant.token);
  const pttl = await client.pttl(keys.claim(name));
  assert.ok(pttl > 4_000 && pttl <= 5_000, `pttl ${pttl}`);
  assert.ok((await client.pttl(keys.claimMeta(name))) > 4_000, "metadata expires with the claim");
  assert.equal(await client.get(keys.claimFence(name)), "1");
  assert.equal(await client.pttl(keys.claimFence(name)), -1, "the fence counter never expires");
  assert.deepEqual(await client.zrange(keys.claimRegistry, "0", "-1"), [name]);
  const stored = await client.hgetall(keys.claimMeta(name));
  assert.deepEqual(Object.keys(stored).sort(), [
    "acquiredAt",
    "fence",
    "holder",
    "jobId",
    "refreshEveryMs",
    "refreshedAt",
    "trail",
    "ttlMs",
  ]);
  assert.equal(stored.fence, "1");
  assert.equal(stored.jobId, "j-1");
  assert.equal(stored.ttlMs, "5000");
  assert.equal(stored.refreshEveryMs, "1000");
  assert.equal(stored.acquiredAt, String(grant.acquiredAt));
  assert.equal(stored.refreshedAt, stored.acquiredAt);
  const { jobId: _jobId, ...identity } = meta;
  assert.deepEqual(JSON.parse(stored.holder!), { host: os.hostname(), pid: process.pid, ...identity });
  assert.ok(Math.abs(grant.acquiredAt - Date.now()) < 5_000, "acquiredAt is the server's ms time");
});

test("a held claim returns its holder and PTTL, and writes nothing", async () => {
  const keys = redisKeys(uniquePrefix());
  const name = claimName("builds/held");
  const first = acquired(await acquireClaim(client, keys, name, { jobId: "a", workerId: "w-a", version: "9" }, timing));
  const second = await acquireClaim(client, keys, name, { jobId: "b" }, timing);
  assert.equal(second.status, "held");
  if (second.status !== "held") return;
  assert.equal(second.holder.jobId, "a");
  assert.equal(second.holder.workerId, "w-a");
  assert.equal(second.holder.pid, process.pid);
  assert.equal(second.holder.fence, first.fence);
  assert.equal(second.version, "9");
  assert.equal(second.ttlMs, 5_000);
  assert.ok(second.pttlMs > 0 && second.pttlMs <= 5_000);
  assert.equal(await client.get(keys.claim(name)), first.token);
  assert.equal(await client.get(keys.claimFence(name)), "1", "a refused acquire issues no fence");

  // No job id never takes over, even from a holder that has none either.
  const anon = redisKeys(uniquePrefix());
  acquired(await acquireClaim(client, anon, name, {}, timing));
  assert.equal((await acquireClaim(client, anon, name, {}, timing)).status, "held");
});

test("takeover by the same job id: new token, higher fence; the old holder is superseded", async () => {
  const keys = redisKeys(uniquePrefix());
  const name = claimName("builds/takeover");
  const first = acquired(
    await acquireClaim(client, keys, name, { jobId: "job-7", workerId: "dead-worker", runId: "run-1" }, timing),
  );
  const retry = acquired(await acquireClaim(client, keys, name, { jobId: "job-7", runId: "run-2" }, timing));
  assert.notEqual(retry.token, first.token);
  assert.equal(retry.fence, first.fence + 1);
  assert.deepEqual(retry.tookOverFrom, { token: first.token, fence: first.fence });
  assert.equal(await client.get(keys.claim(name)), retry.token);
  const stored = await client.hgetall(keys.claimMeta(name));
  assert.equal(JSON.parse(stored.holder!).runId, "run-2");
  assert.equal(JSON.parse(stored.holder!).workerId, "", "nothing of the earlier holder survives");
  assert.equal(stored.fence, String(retry.fence));

  assert.deepEqual(await refreshClaim(client, keys, name, first.token, 5_000), { status: "not-owner" });
  assert.deepEqual(await releaseClaim(client, keys, name, first.token), { status: "not-owner" });
  assert.equal(await client.get(keys.claim(name)), retry.token);

  // Another job id does not take over.
  const other = await acquireClaim(client, keys, name, { jobId: "job-8" }, timing);
  assert.equal(other.status, "held");
  assert.equal(await client.get(keys.claim(name)), retry.token);
  assert.equal(await client.get(keys.claimFence(name)), String(retry.fence));
});

test("takeovers go one way: an earlier attempt of the job never takes the claim from a later one", async () => {
  const keys = redisKeys(uniquePrefix());
  const name = claimName("builds/attempts");
  const second = acquired(
    await acquireClaim(client, keys, name, { jobId: "job-9", attempt: 2, runId: "job-9-a2" }, timing),
  );
  // Attempt 1 lost its job lock before it acquired; attempt 2 holds the claim: 1 is refused.
  const first = await acquireClaim(client, keys, name, { jobId: "job-9", attempt: 1, runId: "job-9-a1" }, timing);
  assert.equal(first.status, "held");
  assert.equal(first.status === "held" && first.holder.attempt, 2);
  assert.equal(await client.get(keys.claim(name)), second.token);
  assert.equal(await client.get(keys.claimFence(name)), String(second.fence), "nothing written");
  // The same attempt again (its first reply lost) and a later one take over.
  const again = acquired(
    await acquireClaim(client, keys, name, { jobId: "job-9", attempt: 2, runId: "job-9-a2" }, timing),
  );
  assert.deepEqual(again.tookOverFrom, { token: second.token, fence: second.fence });
  const third = acquired(
    await acquireClaim(client, keys, name, { jobId: "job-9", attempt: 3, runId: "job-9-a3" }, timing),
  );
  assert.equal(third.fence, again.fence + 1);
  // A holder or a newcomer that names no attempt: no order is known, the takeover is allowed.
  const unordered = acquired(await acquireClaim(client, keys, name, { jobId: "job-9" }, timing));
  assert.equal(unordered.fence, third.fence + 1);
  acquired(await acquireClaim(client, keys, name, { jobId: "job-9", attempt: 1 }, timing));
});

test("refresh: extends an owned claim; foreign token and missing claim change nothing", async () => {
  const keys = redisKeys(uniquePrefix());
  const name = claimName("builds/refresh");
  const grant = acquired(await acquireClaim(client, keys, name, {}, { ttlMs: 2_000, refreshEveryMs: 500 }));
  const before = await client.hgetall(keys.claimMeta(name));
  await new Promise((r) => setTimeout(r, 30));

  assert.deepEqual(await refreshClaim(client, keys, name, "other-host:1:0000", 60_000), { status: "not-owner" });
  assert.ok((await client.pttl(keys.claim(name))) <= 2_000, "a foreign refresh does not extend");
  assert.deepEqual(await client.hgetall(keys.claimMeta(name)), before);

  assert.deepEqual(await refreshClaim(client, keys, name, grant.token, 60_000), { status: "refreshed" });
  assert.ok((await client.pttl(keys.claim(name))) > 50_000);
  assert.ok((await client.pttl(keys.claimMeta(name))) > 50_000);
  const after = await client.hgetall(keys.claimMeta(name));
  assert.ok(Number(after.refreshedAt) > Number(before.refreshedAt), "refreshedAt moves");

  const gone = claimName("builds/never-claimed");
  assert.deepEqual(await refreshClaim(client, keys, gone, grant.token, 1_000), { status: "missing" });
  assert.equal(await client.exists(keys.claim(gone)), 0, "a refresh never creates a claim");
});

test("release never deletes a claim held by another token", async () => {
  const keys = redisKeys(uniquePrefix());
  const name = claimName("builds/release");
  const grant = acquired(await acquireClaim(client, keys, name, {}, timing));

  assert.deepEqual(await releaseClaim(client, keys, name, "someone:2:ffff"), { status: "not-owner" });
  assert.equal(await client.get(keys.claim(name)), grant.token);
  assert.equal(await client.exists(keys.claimMeta(name)), 1);
  assert.deepEqual(await client.zrange(keys.claimRegistry, "0", "-1"), [name]);

  await client.set(keys.claim(name), "other"); // another owner
  assert.deepEqual(await releaseClaim(client, keys, name, grant.token), { status: "not-owner" });
  assert.equal(await client.get(keys.claim(name)), "other");

  await client.set(keys.claim(name), grant.token);
  assert.deepEqual(await releaseClaim(client, keys, name, grant.token), { status: "released" });
  assert.equal(await client.exists(keys.claim(name), keys.claimMeta(name)), 0);
  assert.deepEqual(await client.zrange(keys.claimRegistry, "0", "-1"), []);
  assert.equal(await client.get(keys.claimFence(name)), "1", "release keeps the fence counter");

  // Missing: an expired claim's leftover registry entry is dropped.
  await client.zadd(keys.claimRegistry, 0, name);
  assert.deepEqual(await releaseClaim(client, keys, name, grant.token), { status: "missing" });
  assert.deepEqual(await client.zrange(keys.claimRegistry, "0", "-1"), []);

  // The next grant continues the fence sequence.
  assert.equal(acquired(await acquireClaim(client, keys, name, {}, timing)).fence, 2);
});

test("acquire refuses an invalid name or timing before touching Redis", async () => {
  const keys = redisKeys(uniquePrefix());
  await assert.rejects(acquireClaim(client, keys, "builds/x", {}, timing), /invalid claim name/);
  await assert.rejects(
    acquireClaim(client, keys, claimName("x"), {}, { ttlMs: 1_000, refreshEveryMs: 600 }),
    /at most ttlMs \/ 2/,
  );
  assert.equal(await client.exists(keys.claimRegistry), 0);
});

test("scripts are defined once per client, however often they are used", async () => {
  const fresh = new Redis(server.url);
  try {
    registerScripts(fresh);
    const scriptsSet = (fresh as unknown as { scriptsSet: Record<string, unknown> }).scriptsSet;
    const first = scriptsSet[CLAIM_ACQUIRE.command];
    assert.ok(first, "registered under its command name");
    registerScripts(fresh);
    await acquireClaim(fresh, redisKeys(uniquePrefix()), claimName("once"), {}, timing);
    assert.equal(scriptsSet[CLAIM_ACQUIRE.command], first, "not redefined");
  } finally {
    fresh.disconnect();
  }
});
