/** The fenced publish script: every branch. */
import assert from "node:assert/strict";
import { after, test } from "node:test";
import { acquireClaim, claimName, publishFenced, readPublished, type AcquireResult } from "../../lib/claims/index";
import { createRedis } from "../../lib/redis/client";
import { redisKeys } from "../../lib/redis/keys";
import { startTestRedis, uniquePrefix } from "../support/redis";

const server = await startTestRedis();
const client = createRedis(server.url, "worker");
after(() => client.disconnect());

const timing = { ttlMs: 10_000, refreshEveryMs: 1_000 };
const fenceOf = (result: AcquireResult) => (result.status === "acquired" ? result.fence : assert.fail("not acquired"));

test("the newest grant publishes; older fences are superseded; nothing issued is refused", async () => {
  const keys = redisKeys(uniquePrefix());
  const name = claimName("p/tiles");
  assert.equal(await readPublished(client, keys, name), null);
  assert.deepEqual(await publishFenced(client, keys, { name, fence: 1, value: "v0" }), {
    status: "superseded",
    newestFence: 0,
    publishedFence: 0,
  });

  const first = fenceOf(await acquireClaim(client, keys, name, { jobId: "j" }, timing));
  const second = fenceOf(await acquireClaim(client, keys, name, { jobId: "j" }, timing)); // takeover
  assert.deepEqual(await publishFenced(client, keys, { name, fence: first, value: "v1" }), {
    status: "superseded",
    newestFence: second,
    publishedFence: 0,
  });
  assert.equal(await readPublished(client, keys, name), null, "a superseded publish changes nothing");

  const ok = await publishFenced(client, keys, { name, fence: second, value: "v2", runId: "run-2" });
  assert.equal(ok.status, "published");
  assert.equal(ok.status === "published" && ok.repeated, false);
  const pointer = await readPublished(client, keys, name);
  assert.deepEqual(pointer && { ...pointer, publishedAt: 0 }, {
    fence: second,
    value: "v2",
    runId: "run-2",
    publishedAt: 0,
  });
  assert.ok(Math.abs(pointer!.publishedAt - Date.now()) < 5_000);

  // A retried call of the same publish is recognised; a second, different value is refused:
  // the pointer moves only to a fence higher than what is published.
  const again = await publishFenced(client, keys, { name, fence: second, value: "v2" });
  assert.deepEqual(again, { status: "published", publishedAt: pointer!.publishedAt, repeated: true });
  assert.deepEqual(await publishFenced(client, keys, { name, fence: second, value: "v2-bis" }), {
    status: "superseded",
    newestFence: second,
    publishedFence: second,
  });
  assert.equal((await readPublished(client, keys, name))?.value, "v2");

  await assert.rejects(publishFenced(client, keys, { name, fence: 0, value: "x" }), RangeError);
  await assert.rejects(publishFenced(client, keys, { name, fence: 1.5, value: "x" }), RangeError);
});

test("a published fence above the counter (restored data) refuses every publish until a newer grant", async () => {
  const keys = redisKeys(uniquePrefix());
  const name = claimName("p/restored");
  const fence = fenceOf(await acquireClaim(client, keys, name, {}, timing));
  await client.hset(keys.published(name), { fence: 5, value: "old", publishedAt: 1 });
  assert.deepEqual(await publishFenced(client, keys, { name, fence, value: "new" }), {
    status: "superseded",
    newestFence: 1,
    publishedFence: 5,
  });
});

test("a publish resets the claim's consecutive skips; a superseded one leaves them", async () => {
  const keys = redisKeys(uniquePrefix());
  const name = claimName("p/skips");
  const older = fenceOf(await acquireClaim(client, keys, name, { jobId: "j" }, timing));
  const newer = fenceOf(await acquireClaim(client, keys, name, { jobId: "j" }, timing)); // takeover
  await client.hset(keys.claimSkips, name, "3", "other", "2");
  await publishFenced(client, keys, { name, fence: older, value: "v1" });
  assert.equal(await client.hget(keys.claimSkips, name), "3", "superseded: skips kept");
  await publishFenced(client, keys, { name, fence: newer, value: "v2" });
  assert.equal(await client.hget(keys.claimSkips, name), null, "published: skips reset");
  assert.equal(await client.hget(keys.claimSkips, "other"), "2", "another claim's count stays");
});
