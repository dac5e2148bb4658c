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

  const across = setUp();
  across.cache.apply({ type: "health", report: report(null, 2), at: 2 });
  across.cache.apply({ type: "health", report: report(2, 3), at: 3 });
  await afterCoalescing();
  assert.equal(across.claimsInvalidated(), true);
  across.client.clear();
});
