/**
 * The `claimRefreshes` index (claim name → refreshedAt) against a real redis-server: kept exactly
 * by every claim script path (acquire, takeover, refresh, release, release of an expired claim,
 * force release of a held and of a missing claim, the holder's acknowledgement), entries left by
 * expiry dropped by the reader (and kept when the name was claimed again), and the evaluator's
 * census read through it: the full census' stale claims not refreshed for `for`, index or not.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { readClaimCensus } from "../../lib/claims/census";
import { acquireClaim, claimName, forceReleaseClaim, refreshClaim, releaseClaim } from "../../lib/claims/index";
import { redisKeys, type RedisKeys } from "../../lib/redis/keys";
import { CLAIM_REFRESHES_PRUNE, runVariadicScript } from "../../lib/redis/scripts";
import { startClaimsBed, tokenOf } from "../support/claims-bed";
import { uniquePrefix } from "../support/redis";

const { client, timing } = await startClaimsBed();

/** The index as { name: score }, and each name's metadata refreshedAt for comparison. */
async function indexOf(keys: RedisKeys): Promise<Record<string, number>> {
  const flat = await client.zrange(keys.claimRefreshes, "0", "-1", "WITHSCORES");
  const out: Record<string, number> = {};
  for (let i = 0; i < flat.length; i += 2) out[flat[i]!] = Number(flat[i + 1]);
  return out;
}
const refreshedAt = async (keys: RedisKeys, name: string) =>
  Number(await client.hget(keys.claimMeta(name), "refreshedAt"));

test("acquire, takeover, refresh and release keep the index equal to each claim's refreshedAt", async () => {
  const keys = redisKeys(uniquePrefix("refreshes"));
  const name = claimName("idx/a", "t1");
  const first = tokenOf(await acquireClaim(client, keys, name, { jobId: "j1", workerId: "w" }, timing));
  assert.deepEqual(await indexOf(keys), { [name]: await refreshedAt(keys, name) });

  await new Promise((resolve) => setTimeout(resolve, 5));
  assert.deepEqual(await refreshClaim(client, keys, name, first, timing.ttlMs), { status: "refreshed" });
  assert.deepEqual(await indexOf(keys), { [name]: await refreshedAt(keys, name) });

  // A foreign refresh changes nothing.
  const before = await indexOf(keys);
  assert.deepEqual(await refreshClaim(client, keys, name, "other", timing.ttlMs), { status: "not-owner" });
  assert.deepEqual(await indexOf(keys), before);

  // Takeover by the same job's next attempt: a new grant, a new refreshedAt.
  await new Promise((resolve) => setTimeout(resolve, 5));
  const second = tokenOf(await acquireClaim(client, keys, name, { jobId: "j1", workerId: "w2" }, timing));
  assert.deepEqual(await indexOf(keys), { [name]: await refreshedAt(keys, name) });
  assert.ok((await indexOf(keys))[name]! > before[name]!);

  // Held by another job: nothing written.
  const held = await indexOf(keys);
  assert.equal((await acquireClaim(client, keys, name, { jobId: "j2" }, timing)).status, "held");
  assert.deepEqual(await indexOf(keys), held);

  assert.deepEqual(await releaseClaim(client, keys, name, first), { status: "not-owner" });
  assert.deepEqual(await indexOf(keys), held, "a foreign release leaves the entry");
  assert.deepEqual(await releaseClaim(client, keys, name, second), { status: "released" });
  assert.deepEqual(await indexOf(keys), {});
});

test("an expired claim's entry: dropped by its holder's late release, and by the reader", async () => {
  const keys = redisKeys(uniquePrefix("refreshes-expiry"));
  const late = claimName("idx/late");
  const token = tokenOf(await acquireClaim(client, keys, late, { workerId: "w" }, timing));
  await client.del(keys.claim(late), keys.claimMeta(late)); // expired: no script ran
  assert.deepEqual(Object.keys(await indexOf(keys)), [late], "expiry leaves the entry behind");
  assert.deepEqual(await releaseClaim(client, keys, late, token), { status: "missing" });
  assert.deepEqual(await indexOf(keys), {});

  const gone = claimName("idx/gone");
  const kept = claimName("idx/kept");
  await acquireClaim(client, keys, gone, { workerId: "w" }, timing);
  await acquireClaim(client, keys, kept, { workerId: "w" }, timing);
  await client.del(keys.claim(gone), keys.claimMeta(gone));
  const census = await readClaimCensus(client, keys, new Set(["w"]), { onlyStale: true, notRefreshedForMs: 0 });
  assert.deepEqual(census.claims, []);
  assert.deepEqual(Object.keys(await indexOf(keys)), [kept], "the reader dropped the expired claim's entry");

  // A name claimed again after the reader saw it gone keeps its new entry.
  const dropped = await runVariadicScript(
    client,
    CLAIM_REFRESHES_PRUNE,
    [keys.claimRefreshes],
    [keys.claim(kept)],
    [kept],
  );
  assert.equal(dropped, 0);
  assert.deepEqual(Object.keys(await indexOf(keys)), [kept]);
});

test("force release keeps the entry while the holder stops; its acknowledgement, or a missing claim, drops it", async () => {
  const keys = redisKeys(uniquePrefix("refreshes-force"));
  const name = claimName("idx/force");
  const token = tokenOf(await acquireClaim(client, keys, name, { workerId: "w", jobId: "j" }, timing));
  const before = await indexOf(keys);
  const clients = { claims: client, audit: client };
  const forced = await forceReleaseClaim(clients, keys, { name, token, actor: "op", reason: "stuck" });
  assert.equal(forced.status, "released");
  assert.deepEqual(await indexOf(keys), before, "revoked, still there: it goes stale without refreshes");
  // The census says it is being released (the claimStale alert then asks for no second release).
  const revokedAt = Number(await client.hget(keys.claimMeta(name), "revokedAt"));
  assert.ok(revokedAt > 0);
  for (const census of [
    await readClaimCensus(client, keys, undefined),
    await readClaimCensus(client, keys, new Set(), { onlyStale: true }),
    await readClaimCensus(client, keys, new Set(), { onlyStale: true, notRefreshedForMs: 0 }),
  ]) {
    const claim = census.claims.find((c) => c.name === name);
    assert.equal(claim?.holder.revokedAt, revokedAt);
    assert.equal(claim?.holder.workerId, "w", "the holder's identity still decodes after the new field");
  }
  assert.deepEqual(await refreshClaim(client, keys, name, token, timing.ttlMs), { status: "revoked" });
  assert.deepEqual(await indexOf(keys), before);
  assert.deepEqual(await releaseClaim(client, keys, name, token), { status: "acknowledged" });
  assert.deepEqual(await indexOf(keys), {});

  const other = claimName("idx/force-missing");
  const otherToken = tokenOf(await acquireClaim(client, keys, other, { workerId: "w" }, timing));
  await client.del(keys.claim(other), keys.claimMeta(other));
  const missing = await forceReleaseClaim(clients, keys, { name: other, token: otherToken, actor: "op", reason: "x" });
  assert.equal(missing.status, "missing");
  assert.deepEqual(await indexOf(keys), {});
});

test("census through the index: the full census' stale claims not refreshed for `for`, unindexed claims included", async () => {
  const keys = redisKeys(uniquePrefix("refreshes-census"));
  const [seconds] = await client.time();
  const now = Number(seconds) * 1000;
  /** What a refresh `ago` ms back would have written: the metadata and the index alike. */
  const refreshedAgo = async (name: string, ago: number) => {
    await client.hset(keys.claimMeta(name), "refreshedAt", String(now - ago));
    await client.zadd(keys.claimRefreshes, now - ago, name);
  };
  const grant = (name: string, workerId: string) =>
    acquireClaim(client, keys, name, { workerId, rebuild: "r" }, { ttlMs: 600_000, refreshEveryMs: 10_000 });
  await grant("output:idx-healthy", "w1");
  await grant("output:idx-dead-fresh", "gone"); // holder not live, refreshed just now: stale, not for long
  await grant("output:idx-dead-old", "gone");
  await refreshedAgo("output:idx-dead-old", 120_000);
  await grant("output:idx-overdue", "w1");
  await refreshedAgo("output:idx-overdue", 90_000);
  await grant("output:idx-overdue-recent", "w1");
  await refreshedAgo("output:idx-overdue-recent", 25_000); // stale (two intervals), not yet for a minute
  await grant("output:idx-unindexed", "gone"); // acquired by a claimwatch that kept no index
  await client.zrem(keys.claimRefreshes, "output:idx-unindexed");

  const live = new Set(["w1"]);
  const names = async (forMs: number) =>
    (await readClaimCensus(client, keys, live, { onlyStale: true, notRefreshedForMs: forMs })).claims
      .map((claim) => claim.name)
      .sort();
  const full = await readClaimCensus(client, keys, live);
  const staleFor = (forMs: number) =>
    full.claims
      .filter((claim) => claim.stale.length > 0)
      .filter((claim) => claim.holder.refreshedAt! <= full.serverTime - forMs || claim.name === "output:idx-unindexed")
      .map((claim) => claim.name)
      .sort();
  assert.deepEqual(await names(0), staleFor(0));
  assert.deepEqual(await names(0), [
    "output:idx-dead-fresh",
    "output:idx-dead-old",
    "output:idx-overdue",
    "output:idx-overdue-recent",
    "output:idx-unindexed",
  ]);
  assert.deepEqual(await names(60_000), ["output:idx-dead-old", "output:idx-overdue", "output:idx-unindexed"]);
  assert.deepEqual(await names(60_000), staleFor(60_000));
  assert.deepEqual(await names(100_000), ["output:idx-dead-old", "output:idx-unindexed"]);
  // A refresh takes a claim out of the reader's view until it is old again.
  const overdue = await client.get(keys.claim("output:idx-overdue"));
  assert.deepEqual(await refreshClaim(client, keys, "output:idx-overdue", overdue!, 600_000), { status: "refreshed" });
  assert.deepEqual(await names(60_000), ["output:idx-dead-old", "output:idx-unindexed"]);
});
