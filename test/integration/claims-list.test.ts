/** Listing claims (registry + one pipeline), pruning, staleness, paging, consecutive skips. */
import assert from "node:assert/strict";
import { after, test } from "node:test";
import {
  acquireClaim,
  claimName,
  listClaims,
  readClaim,
  readClaimsByName,
  readSkips,
  readSkipsMany,
  recordSkip,
  resetSkips,
} from "../../lib/claims/index";
import { createRedis } from "../../lib/redis/client";
import { redisKeys } from "../../lib/redis/keys";
import { CLAIM_PRUNE, runScript } from "../../lib/redis/scripts";
import { startTestRedis, uniquePrefix } from "../support/redis";

const server = await startTestRedis();
const client = createRedis(server.url, "worker");
after(() => client.disconnect());

const timing = { ttlMs: 60_000, refreshEveryMs: 10_000 };

test("listClaims returns every active claim with PTTL, metadata, skips and staleness", async () => {
  const keys = redisKeys(uniquePrefix());
  const fresh = claimName("l/fresh");
  const overdue = claimName("l/overdue");
  const orphan = claimName("l/orphan");
  const grant = await acquireClaim(
    client,
    keys,
    fresh,
    { workerId: "w-live", jobId: "j1", runId: "r1", rebuild: "tiles", version: "2" },
    timing,
  );
  assert.equal(grant.status, "acquired");
  await acquireClaim(client, keys, overdue, { workerId: "w-live" }, timing);
  await acquireClaim(client, keys, orphan, { workerId: "w-dead" }, timing);
  // The overdue holder last refreshed 25 s ago (2.5 × its interval).
  const refreshedAt = Number(await client.hget(keys.claimMeta(overdue), "refreshedAt"));
  await client.hset(keys.claimMeta(overdue), "refreshedAt", refreshedAt - 25_000);
  await recordSkip(client, keys, fresh);
  await recordSkip(client, keys, fresh);

  const page = await listClaims(client, keys, { liveWorkerIds: new Set(["w-live"]) });
  assert.deepEqual(
    page.claims.map((c) => c.name),
    [fresh, orphan, overdue],
  );
  assert.equal(page.nextCursor, null);
  assert.equal(page.pruned, 0);
  const [a, b, c] = page.claims;
  assert.equal(a!.token, grant.status === "acquired" ? grant.token : "");
  assert.equal(a!.fence, 1);
  assert.ok(a!.pttlMs > 50_000 && a!.pttlMs <= 60_000);
  assert.equal(a!.holder.workerId, "w-live");
  assert.equal(a!.holder.runId, "r1");
  assert.equal(a!.holder.rebuild, "tiles");
  assert.equal(a!.holder.version, "2");
  assert.equal(a!.holder.pid, process.pid);
  assert.equal(a!.consecutiveSkips, 2);
  assert.deepEqual(a!.stale, []);
  assert.deepEqual(b!.stale, [{ kind: "holder-not-live", workerId: "w-dead" }]);
  assert.equal(c!.stale.length, 1);
  const [reason] = c!.stale;
  assert.equal(reason!.kind, "refresh-overdue");
  assert.ok(
    reason!.kind === "refresh-overdue" && reason!.sinceRefreshMs >= 25_000 && reason!.refreshEveryMs === 10_000,
  );
  assert.ok(Math.abs(page.serverTime - Date.now()) < 5_000);

  // Without the live set the heartbeat check is skipped (the claims Redis may be another server).
  const noHeartbeats = await listClaims(client, keys);
  assert.deepEqual(noHeartbeats.claims.find((x) => x.name === orphan)!.stale, []);

  const one = await readClaim(client, keys, fresh);
  assert.equal(one?.token, a!.token);
  assert.equal(await readClaim(client, keys, claimName("l/none")), null);
});

test("entries whose claim expired are pruned; a name claimed again meanwhile is kept", async () => {
  const keys = redisKeys(uniquePrefix());
  const shortLived = claimName("l/short");
  const kept = claimName("l/kept");
  await acquireClaim(client, keys, shortLived, {}, { ttlMs: 100, refreshEveryMs: 50 });
  await acquireClaim(client, keys, kept, {}, timing);
  await new Promise((r) => setTimeout(r, 200));

  const page = await listClaims(client, keys);
  assert.deepEqual(
    page.claims.map((c) => c.name),
    [kept],
  );
  assert.equal(page.pruned, 1);
  assert.deepEqual(await client.zrange(keys.claimRegistry, "0", "-1"), [kept]);

  // The prune script's other branch: the claim exists again, so its entry stays.
  await client.zadd(keys.claimRegistry, 0, shortLived);
  await client.set(keys.claim(shortLived), "new-holder");
  assert.equal(
    await runScript(
      client,
      CLAIM_PRUNE,
      [keys.claim(shortLived), keys.claimRegistry, keys.claimTrail(shortLived), keys.claimsEnded],
      [shortLived],
    ),
    0,
  );
  assert.equal(await client.zscore(keys.claimRegistry, shortLived), "0");
  await client.del(keys.claim(shortLived));
  assert.equal(
    await runScript(
      client,
      CLAIM_PRUNE,
      [keys.claim(shortLived), keys.claimRegistry, keys.claimTrail(shortLived), keys.claimsEnded],
      [shortLived],
    ),
    1,
  );
  assert.equal(await client.zscore(keys.claimRegistry, shortLived), null);
});

test("10 000 claims page through in name order with O(page) Redis work", async () => {
  const keys = redisKeys(uniquePrefix("page"));
  const names = Array.from({ length: 10_000 }, (_, i) => claimName(`tiles/${String(i).padStart(5, "0")}`));
  for (let i = 0; i < names.length; i += 1_000) {
    const batch = names.slice(i, i + 1_000);
    const results = await Promise.all(batch.map((name) => acquireClaim(client, keys, name, {}, timing)));
    assert.ok(results.every((r) => r.status === "acquired"));
  }

  const limit = 250;
  await client.config("RESETSTAT");
  const first = await listClaims(client, keys, { limit });
  const stats = (await client.info("commandstats")).split("\n").filter((line) => line.startsWith("cmdstat_"));
  const calls = (command: string) =>
    Number(/calls=(\d+)/.exec(stats.find((l) => l.startsWith(`cmdstat_${command}:`)) ?? "")?.[1] ?? 0);
  const work = ["zrangebylex", "get", "pttl", "hgetall", "hget", "time", "scan", "keys"].reduce(
    (sum, c) => sum + calls(c),
    0,
  );
  assert.equal(calls("scan") + calls("keys"), 0, "never scans the keyspace");
  assert.ok(work <= 4 * limit + 2, `one page of ${limit} cost ${work} commands`);

  const seen = [...first.claims.map((c) => c.name)];
  let cursor = first.nextCursor;
  let pages = 1;
  while (cursor) {
    const page = await listClaims(client, keys, { limit, cursor });
    assert.ok(page.claims.length <= limit);
    seen.push(...page.claims.map((c) => c.name));
    cursor = page.nextCursor;
    pages += 1;
  }
  assert.equal(seen.length, 10_000);
  assert.deepEqual(seen, names, "every claim once, in name order");
  assert.equal(pages, 41, "40 full pages and an empty last one");
  await assert.rejects(listClaims(client, keys, { limit: 0 }), RangeError);
});

test("consecutive skips: counted per name, reset on a completed rebuild, readable without a claim", async () => {
  const keys = redisKeys(uniquePrefix());
  const name = claimName("l/skipped");
  const other = claimName("l/other");
  assert.equal(await readSkips(client, keys, name), 0);
  assert.equal(await recordSkip(client, keys, name), 1);
  assert.equal(await recordSkip(client, keys, name), 2);
  assert.equal(await recordSkip(client, keys, other), 1);
  assert.equal(await readSkips(client, keys, name), 2, "readable with no claim held");
  assert.deepEqual(
    await readSkipsMany(client, keys, [name, other, claimName("l/never")]),
    new Map([
      [name, 2],
      [other, 1],
      [claimName("l/never"), 0],
    ]),
  );
  await acquireClaim(client, keys, name, {}, timing);
  assert.equal((await readClaim(client, keys, name))?.consecutiveSkips, 2, "readable with the claim");
  await resetSkips(client, keys, name);
  assert.equal(await readSkips(client, keys, name), 0);
  assert.equal(await readSkips(client, keys, other), 1);
});

test("readClaimsByName reads several claims in one call; names nobody holds are absent", async () => {
  const keys = redisKeys(uniquePrefix());
  const [a, b, free] = [claimName("m/a"), claimName("m/b"), claimName("m/free")];
  const grants = [
    await acquireClaim(client, keys, a, { version: "va" }, timing),
    await acquireClaim(client, keys, b, { version: "vb" }, timing),
  ];
  await recordSkip(client, keys, b);
  const claims = await readClaimsByName(client, keys, [a, b, free]);
  assert.deepEqual([...claims.keys()].sort(), [a, b]);
  for (const [i, name] of [a, b].entries()) {
    const grant = grants[i]!;
    assert.ok(grant.status === "acquired");
    const one = await readClaim(client, keys, name);
    assert.equal(claims.get(name)!.token, grant.token);
    assert.equal(claims.get(name)!.fence, grant.fence);
    assert.deepEqual(claims.get(name)!.holder, one!.holder, "the same holder as readClaim shows");
  }
  assert.equal(claims.get(b)!.consecutiveSkips, 1);
  assert.equal((await readClaimsByName(client, keys, [])).size, 0);
});
