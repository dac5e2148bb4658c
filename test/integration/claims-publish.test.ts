/** The fenced publish script: every branch. */
import assert from "node:assert/strict";
import { test } from "node:test";
import {
  acquireClaim,
  claimName,
  forceReleaseClaim,
  publishFenced,
  readPublished,
  releaseClaim,
} from "../../lib/claims/index";
import { redisKeys } from "../../lib/redis/keys";
import { grantOf, startClaimsBed } from "../support/claims-bed";
import { uniquePrefix } from "../support/redis";

const { client, timing } = await startClaimsBed();

test("the newest grant publishes; older fences are superseded; nothing issued is refused", async () => {
  const keys = redisKeys(uniquePrefix());
  const name = claimName("p/tiles");
  assert.equal(await readPublished(client, keys, name), null);
  assert.deepEqual(await publishFenced(client, keys, { name, fence: 1, token: "nobody", value: "v0" }), {
    status: "superseded",
    newestFence: 0,
    publishedFence: 0,
  });

  const firstGrant = grantOf(await acquireClaim(client, keys, name, { jobId: "j" }, timing));
  const secondGrant = grantOf(await acquireClaim(client, keys, name, { jobId: "j" }, timing)); // takeover
  const [first, second] = [firstGrant.fence, secondGrant.fence];
  const token = secondGrant.token;
  assert.deepEqual(await publishFenced(client, keys, { name, fence: first, token: firstGrant.token, value: "v1" }), {
    status: "superseded",
    newestFence: second,
    publishedFence: 0,
  });
  assert.equal(await readPublished(client, keys, name), null, "a superseded publish changes nothing");

  const ok = await publishFenced(client, keys, { name, fence: second, token, value: "v2", runId: "run-2" });
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
  const again = await publishFenced(client, keys, { name, fence: second, token, value: "v2" });
  assert.deepEqual(again, { status: "published", publishedAt: pointer!.publishedAt, repeated: true });
  assert.deepEqual(await publishFenced(client, keys, { name, fence: second, token, value: "v2-bis" }), {
    status: "superseded",
    newestFence: second,
    publishedFence: second,
  });
  assert.equal((await readPublished(client, keys, name))?.value, "v2");

  await assert.rejects(publishFenced(client, keys, { name, fence: 0, token, value: "x" }), RangeError);
  await assert.rejects(publishFenced(client, keys, { name, fence: 1.5, token, value: "x" }), RangeError);
});

test("a published fence above the counter (restored data) refuses every publish until a newer grant", async () => {
  const keys = redisKeys(uniquePrefix());
  const name = claimName("p/restored");
  const { fence, token } = grantOf(await acquireClaim(client, keys, name, {}, timing));
  await client.hset(keys.published(name), { fence: 5, value: "old", publishedAt: 1 });
  assert.deepEqual(await publishFenced(client, keys, { name, fence, token, value: "new" }), {
    status: "superseded",
    newestFence: 1,
    publishedFence: 5,
  });
});

test("a publish resets the claim's consecutive skips; a superseded one leaves them", async () => {
  const keys = redisKeys(uniquePrefix());
  const name = claimName("p/skips");
  const older = grantOf(await acquireClaim(client, keys, name, { jobId: "j" }, timing));
  const newer = grantOf(await acquireClaim(client, keys, name, { jobId: "j" }, timing)); // takeover
  await client.hset(keys.claimSkips, name, "3", "other", "2");
  await publishFenced(client, keys, { name, ...older, value: "v1" });
  assert.equal(await client.hget(keys.claimSkips, name), "3", "superseded: skips kept");
  await publishFenced(client, keys, { name, ...newer, value: "v2" });
  assert.equal(await client.hget(keys.claimSkips, name), null, "published: skips reset");
  assert.equal(await client.hget(keys.claimSkips, "other"), "2", "another claim's count stays");
});

test("a holder whose claim was force-released (or expired) cannot publish, though its fence is still the newest", async () => {
  const keys = redisKeys(uniquePrefix());
  const name = claimName("p/force-released");
  const grant = grantOf(await acquireClaim(client, keys, name, { jobId: "j" }, timing));
  const released = await forceReleaseClaim({ claims: client, audit: client }, keys, {
    name,
    token: grant.token,
    actor: "op",
    reason: "looked dead",
  });
  assert.equal(released.status, "released");
  assert.deepEqual(await publishFenced(client, keys, { name, ...grant, value: "late" }), {
    status: "superseded",
    newestFence: grant.fence,
    publishedFence: 0,
  });
  assert.equal(await readPublished(client, keys, name), null, "nothing published");
  // The revoked holder stops and acknowledges; only then is the name free.
  assert.deepEqual(await releaseClaim(client, keys, name, grant.token), { status: "acknowledged" });

  // The same with the claim gone by itself, and with another token in it.
  const again = grantOf(await acquireClaim(client, keys, name, { jobId: "k" }, timing));
  await releaseClaim(client, keys, name, again.token);
  assert.equal((await publishFenced(client, keys, { name, ...again, value: "late" })).status, "superseded");
  const third = grantOf(await acquireClaim(client, keys, name, { jobId: "m" }, timing));
  await client.set(keys.claim(name), "another-owner"); // another owner
  assert.equal((await publishFenced(client, keys, { name, ...third, value: "late" })).status, "superseded");
  await client.set(keys.claim(name), third.token);
  assert.equal((await publishFenced(client, keys, { name, ...third, value: "mine" })).status, "published");
});
