/**
 * The whole-claims census (`readWholeCensus`, the /metrics scrape's read) against a real
 * redis-server: CLAIM_CENSUS_PAGE walks the registry a page at a time and builds each claim's keys
 * itself. Every held claim comes back once, in name order, across page boundaries; registry names
 * whose claim expired, or that have no metadata, are left out; and a claim released (or one
 * registered) while the pages are read never shifts another claim out of the census, as paging
 * by position would.
 */
import assert from "node:assert/strict";
import { after, test } from "node:test";
import { readWholeCensus, type CensusClaim } from "../../lib/claims/census";
import { acquireClaim, claimName, releaseClaim, type AcquireResult } from "../../lib/claims/index";
import { createRedis } from "../../lib/redis/client";
import { redisKeys } from "../../lib/redis/keys";
import { CENSUS_PAGE_SIZE } from "../../lib/redis/scripts";
import { startTestRedis, uniquePrefix } from "../support/redis";

const server = await startTestRedis();
const client = createRedis(server.url, "worker");
after(() => client.disconnect());

const timing = { ttlMs: 600_000, refreshEveryMs: 60_000 };
const tokenOf = (result: AcquireResult) => (result.status === "acquired" ? result.token : assert.fail("not acquired"));

/** `count` claims named so they sort by `i` (zero-padded), acquired 200 at a time; their tokens. */
async function holdClaims(keys: ReturnType<typeof redisKeys>, count: number): Promise<Map<string, string>> {
  const tokens = new Map<string, string>();
  const names = Array.from({ length: count }, (_, i) => claimName(`/srv/census/${String(i).padStart(5, "0")}`));
  for (let i = 0; i < names.length; i += 200) {
    const batch = names.slice(i, i + 200);
    const grants = await Promise.all(
      batch.map((name) => acquireClaim(client, keys, name, { workerId: "w1", rebuild: "r" }, timing)),
    );
    grants.forEach((grant, j) => tokens.set(batch[j]!, tokenOf(grant)));
  }
  return tokens;
}

test("every held claim once, in name order, across pages; gone claims and claims without metadata left out", async () => {
  const keys = redisKeys(uniquePrefix("census-pages"));
  const tokens = await holdClaims(keys, 2 * CENSUS_PAGE_SIZE + 3);
  const names = [...tokens.keys()];
  // Expired since registered (the registry entry stays: nothing runs when a key expires) …
  const expired = [names[5]!, names[CENSUS_PAGE_SIZE]!, names[names.length - 1]!];
  for (const name of expired) await client.del(keys.claim(name));
  // … and a claim whose metadata hash is gone.
  const noMeta = names[CENSUS_PAGE_SIZE + 7]!;
  await client.del(keys.claimMeta(noMeta));

  const census = await readWholeCensus(client, keys, new Set(["w1"]));
  const expected = names.filter((name) => !expired.includes(name) && name !== noMeta).sort();
  assert.deepEqual(
    census.claims.map((claim) => claim.name),
    expected,
  );
  for (const claim of census.claims) {
    assert.ok(claim.pttlMs > 0 && claim.pttlMs <= timing.ttlMs, `${claim.name}: pttl ${claim.pttlMs}`);
    assert.equal(claim.holder.workerId, "w1");
    assert.equal(claim.holder.rebuild, "r");
    assert.deepEqual(claim.stale, []);
  }
  assert.ok(census.serverTime > 0);

  // With a visitor, the same claims go to it and none is kept.
  const visited: string[] = [];
  const streamed = await readWholeCensus(client, keys, Promise.resolve(new Set(["w1"])), (claim) =>
    visited.push(claim.name),
  );
  assert.deepEqual(visited, expected);
  assert.deepEqual(streamed.claims, []);
});

test("a claim released or registered while the pages are read shifts no other claim out", async () => {
  const keys = redisKeys(uniquePrefix("census-shift"));
  const tokens = await holdClaims(keys, 2 * CENSUS_PAGE_SIZE + 50);
  const names = [...tokens.keys()].sort();
  const released = names.slice(0, 40);
  const early = claimName("/srv/census/!early"); // sorts before every other name
  const visited: CensusClaim[] = [];
  let changed = false;
  await readWholeCensus(client, keys, new Set(["w1"]), (claim) => {
    visited.push(claim);
    if (changed) return;
    changed = true;
    // While the first page is decoded (the second is already asked for): pages after it would
    // start 40 names too late if they were counted by position.
    void Promise.all([
      ...released.map((name) => releaseClaim(client, keys, name, tokens.get(name)!)),
      acquireClaim(client, keys, early, { workerId: "w1" }, timing),
    ]);
  });
  const seen = visited.map((claim) => claim.name);
  assert.equal(new Set(seen).size, seen.length, "no claim twice");
  // Every claim held throughout is in the census (the released ones may or may not be).
  const missing = names.filter((name) => !released.includes(name) && !seen.includes(name));
  assert.deepEqual(missing, []);
});
