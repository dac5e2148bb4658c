/**
 * The record of outputs whose `current` lags behind their published build (lib/rebuilds/current-lag):
 * lagging since it was first seen so, through publishes it could not follow either; cleared when
 * it follows; a disk that fails before `current` is read says "cannot be checked"; an entry nobody
 * sees again is not shown after LAG_SEEN_WITHIN_MS and removed after LAG_FORGOTTEN_AFTER_MS.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import type { Redis } from "ioredis";
import {
  currentLagProblems,
  LAG_FORGOTTEN_AFTER_MS,
  LAG_SEEN_WITHIN_MS,
  recordCurrentLag,
} from "../../lib/rebuilds/current-lag";
import { closeRedis, createRedis } from "../../lib/redis/client";
import { redisKeys } from "../../lib/redis/keys";
import { formatAbsolute } from "../../lib/time-text";
import { startTestRedis, stopTestRedis, uniquePrefix, type TestRedis } from "../support/redis";

let server: TestRedis;
let client: Redis;
before(async () => {
  server = await startTestRedis();
  client = createRedis(`redis://127.0.0.1:${server.port}`, "worker");
});
after(async () => {
  await closeRedis(client);
  await stopTestRedis(server);
});

const lag = (build: string, fence: number, checked = true) => ({ reason: "EIO", fence, build, checked });

test("an output lagging stays named from when it was first seen lagging until it follows; per host", async () => {
  const keys = redisKeys(uniquePrefix("lag"));
  await recordCurrentLag(client, keys, [{ outputDir: "/o/tiles", lag: lag("a".repeat(32), 4) }], 1_000, "h1");
  // A newer publish it cannot follow either: still lagging since 1 000.
  await recordCurrentLag(client, keys, [{ outputDir: "/o/tiles", lag: lag("b".repeat(32), 5) }], 2_000, "h1");
  await recordCurrentLag(client, keys, [{ outputDir: "/o/tiles", lag: null }], 2_000, "h2");
  const [line, ...rest] = await currentLagProblems(client, keys, 2_500);
  assert.deepEqual(rest, [], "h2 follows: one line");
  assert.match(line!, /^\/o\/tiles\/current on h1 still serves an older build than the published b{32} \(fence 5\)/);
  assert.ok(line!.includes(`since ${formatAbsolute(1_000, "utc")}`), line);
  // It follows: no longer named.
  await recordCurrentLag(client, keys, [{ outputDir: "/o/tiles", lag: null }], 3_000, "h1");
  assert.deepEqual(await currentLagProblems(client, keys, 3_500), []);
});

test("a disk that fails before current is read: cannot be checked; entries nobody sees again are hidden, then removed", async () => {
  const keys = redisKeys(uniquePrefix("lag"));
  await recordCurrentLag(client, keys, [{ outputDir: "/o/a", lag: lag("c".repeat(32), 2, false) }], 10_000, "gone");
  const [line] = await currentLagProblems(client, keys, 10_000);
  assert.match(line!, /^\/o\/a\/current on gone cannot be checked against the published c{32} \(fence 2\)/);
  assert.deepEqual(await currentLagProblems(client, keys, 10_000 + LAG_SEEN_WITHIN_MS + 1), [], "not seen lately");
  // Another host's pass, long after: the forgotten entry is removed (a renamed host, a removed output).
  await recordCurrentLag(client, keys, [], 10_000 + LAG_FORGOTTEN_AFTER_MS + 1, "other");
  assert.equal(await client.hlen(keys.currentLagging), 0);
});
