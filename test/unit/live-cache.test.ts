/**
 * LiveCache's health handling: a worker coming or going makes the claims re-read (their holders
 * may be stale now); a probe that could not count the workers (null) is not a change, so a slow
 * probe between two equal counts costs no re-read.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { QueryClient } from "@tanstack/react-query";
import type { HealthReport } from "../../lib/health/health";
import { LiveCache } from "../../lib/ui/live-cache";
import { queryKeys } from "../../lib/ui/queries";

const ok = { ok: true } as HealthReport["redis"];
const report = (workers: number | null, checkedAt: number): HealthReport => ({
  ok: workers !== null,
  redis: ok,
  claimsRedis: ok,
  workers,
  problems: [],
  checkedAt,
});

function setUp(): { client: QueryClient; cache: LiveCache; claimsInvalidated: () => boolean } {
  const client = new QueryClient();
  const claimsKey = queryKeys.claims.page(null);
  client.setQueryData(claimsKey, { claims: [], serverTime: Date.now(), nextCursor: null });
  client.setQueryData(queryKeys.health(), report(3, 1));
  return {
    client,
    cache: new LiveCache(client),
    claimsInvalidated: () => client.getQueryState(claimsKey)?.isInvalidated === true,
  };
}

const afterCoalescing = () => new Promise((r) => setTimeout(r, 300));

test("a slow probe (workers unknown) between two equal counts re-reads nothing", async () => {
  const { client, cache, claimsInvalidated } = setUp();
  cache.apply({ type: "health", report: report(null, 2), at: 2 });
  cache.apply({ type: "health", report: report(3, 3), at: 3 });
  await afterCoalescing();
  assert.equal(claimsInvalidated(), false);
  client.clear();
});

test("a worker that went away (also across a slow probe) makes the claims re-read", async () => {
  const direct = setUp();
  direct.cache.apply({ type: "health", report: report(2, 2), at: 2 });
  await afterCoalescing();
  assert.equal(direct.claimsInvalidated(), true);
  direct.client.clear();

  // An open run page re-reads too: its worker may be the one that went silent.
  const runKey = queryKeys.runs.detail("run-x-a1");
  const withRun = setUp();
  withRun.client.setQueryData(runKey, { id: "run-x-a1" });
  withRun.cache.apply({ type: "health", report: report(2, 2), at: 2 });
  await afterCoalescing();
  assert.equal(withRun.client.getQueryState(runKey)?.isInvalidated, true, "the run page re-reads");
  withRun.client.clear();

  const across = setUp();
  across.cache.apply({ type: "health", report: report(null, 2), at: 2 });
  across.cache.apply({ type: "health", report: report(2, 3), at: 3 });
  await afterCoalescing();
  assert.equal(across.claimsInvalidated(), true);
  across.client.clear();
});

test("a searched claims page keeps its claims through live events and takes new ones whose name contains the text, case-insensitive (black-box helper-126: a search emptied within seconds)", () => {
  const client = new QueryClient();
  const cache = new LiveCache(client);
  const claim = (name: string, token: string) => ({
    name,
    token,
    fence: 1,
    acquiredAt: 1,
    ttlMs: 20_000,
    refreshEveryMs: 5_000,
    rebuild: "slow",
    tenant: null,
    version: "v1",
    holder: { host: "h", pid: 1, workerId: "w", jobId: "j", runId: "r" },
  });
  const searched = queryKeys.claims.page(null, "SLOW");
  const held = claim("output:/srv/out/slow", "t1");
  client.setQueryData(searched, {
    claims: [{ ...held, refreshedAt: 1, pttlMs: 20_000, stale: false, consecutiveSkips: 0, revoked: null }],
    serverTime: Date.now(),
    nextCursor: null,
  });
  const names = () => (client.getQueryData(searched) as { claims: { name: string }[] }).claims.map((c) => c.name);
  cache.apply({ type: "claim.refreshed", name: held.name, token: "t1", ttlMs: 20_000, at: Date.now() });
  assert.deepEqual(names(), ["output:/srv/out/slow"]);
  cache.apply({
    type: "claim.acquired",
    tookOverFrom: null,
    ...claim("tenant:slow-reports:acme", "t2"),
    at: Date.now(),
  });
  cache.apply({ type: "claim.acquired", tookOverFrom: null, ...claim("output:/srv/out/tiles", "t3"), at: Date.now() });
  assert.deepEqual(names(), ["output:/srv/out/slow", "tenant:slow-reports:acme"]);
  client.clear();
});

test("a run's progress or steps re-read no list; its status or version re-reads the rebuilds, the timeline and the queue (helper-131: each log flush re-read them)", async () => {
  const client = new QueryClient();
  const lists = [queryKeys.rebuilds.page(null, ""), queryKeys.timeline.window("24h", null), queryKeys.queue.list({})];
  const setLists = () => {
    for (const key of lists) client.setQueryData(key, { set: Date.now() });
  };
  const invalidated = () => lists.filter((key) => client.getQueryState(key)?.isInvalidated === true).length;
  const cache = new LiveCache(client);
  setLists();
  cache.apply({ type: "run", run: { id: "run-x-a1", rebuild: "tiles", tenant: null, progress: 0.5 }, at: 1 });
  cache.apply({ type: "run", run: { id: "run-x-a1", rebuild: "tiles", tenant: null }, at: 2 });
  await afterCoalescing();
  assert.equal(invalidated(), 0, "progress alone");
  cache.apply({ type: "run", run: { id: "run-x-a1", rebuild: "tiles", tenant: null, status: "rebuilt" }, at: 3 });
  await afterCoalescing();
  assert.equal(invalidated(), 3, "a status move");
  setLists();
  cache.apply({ type: "run", run: { id: "run-x-a1", rebuild: "tiles", tenant: null, version: "v2" }, at: 4 });
  await afterCoalescing();
  assert.equal(invalidated(), 3, "a version learnt");
  client.clear();
});

test("a claim's refresh re-reads the Rebuilds lists (their TTL left), at most once in 5 s", async () => {
  const client = new QueryClient();
  const rebuilds = queryKeys.rebuilds.page(null, "");
  const cache = new LiveCache(client);
  const refreshed = (at: number) =>
    cache.apply({ type: "claim.refreshed", name: "output:/x", token: "t", ttlMs: 10_000, at });
  client.setQueryData(rebuilds, { set: 1 });
  refreshed(1);
  await afterCoalescing();
  assert.equal(client.getQueryState(rebuilds)?.isInvalidated, true, "the first refresh");
  client.setQueryData(rebuilds, { set: 2 });
  refreshed(2);
  await afterCoalescing();
  assert.equal(client.getQueryState(rebuilds)?.isInvalidated, false, "a refresh within 5 s of the last re-read");
  client.clear();
});
