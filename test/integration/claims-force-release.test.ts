/**
 * Operator force release: checked against the shown token, every attempt audited. The claim is
 * revoked, not deleted: nobody else can take it until its holder has stopped and acknowledged
 * (its release), or the release window (its TTL + its declared stop time + a margin) ran out.
 */
import assert from "node:assert/strict";
import os from "node:os";
import { test } from "node:test";
import { listAudit } from "../../lib/audit/index";
import {
  acquireClaim,
  claimName,
  forceReleaseClaim,
  InvalidClaimNameError,
  listClaims,
  refreshClaim,
  releaseClaim,
} from "../../lib/claims/index";
import { FORCE_RELEASE_MARGIN_MS } from "../../lib/claims/force-release";
import { redisKeys } from "../../lib/redis/keys";
import { startClaimsBed, tokenOf } from "../support/claims-bed";
import { uniquePrefix } from "../support/redis";

const { client, timing } = await startClaimsBed();
const clients = { claims: client, audit: client };

test("a stale token is refused and audited as refused; the shown token releases and is audited", async () => {
  const keys = redisKeys(uniquePrefix());
  const name = claimName("f/tiles", "acme");
  const shown = tokenOf(await acquireClaim(client, keys, name, { jobId: "j", workerId: "w-1", runId: "r-1" }, timing));
  const before = await listClaims(client, keys);
  assert.equal(before.claims[0]?.token, shown, "the operator is shown the current token");
  // Meanwhile a new attempt of the job took the claim over.
  const current = tokenOf(
    await acquireClaim(client, keys, name, { jobId: "j", workerId: "w-2", runId: "r-2" }, timing),
  );

  const refused = await forceReleaseClaim(clients, keys, {
    name,
    token: shown,
    actor: "alice",
    reason: "looked stuck",
  });
  assert.equal(refused.status, "not-owner");
  assert.equal(refused.status === "not-owner" && refused.currentToken, current);
  assert.equal(refused.status === "not-owner" && refused.holder.runId, "r-2");
  assert.equal(await client.get(keys.claim(name)), current, "the newer holder is untouched");
  assert.equal(await client.exists(keys.claimMeta(name)), 1);
  assert.deepEqual(await client.zrange(keys.claimRegistry, "0", "-1"), [name]);

  const released = await forceReleaseClaim(clients, keys, {
    name,
    token: current,
    actor: "bob",
    reason: "worker w-2 is gone",
  });
  assert.equal(released.status, "released");
  assert.equal(released.status === "released" && released.holder.workerId, "w-2");
  const window = released.status === "released" ? released.releaseWindowMs : 0;
  assert.ok(window > 10_000 - 2_000 && window <= 10_000 + FORCE_RELEASE_MARGIN_MS, `release window ${window} ms`);

  // Revoked, not freed: the holder may still be writing. Nobody takes the claim, not even the
  // same job's next attempt, and the holder's next refresh is told.
  const listed = (await listClaims(client, keys)).claims[0];
  assert.equal(listed?.token, current, "listed with the holder's token");
  assert.equal(listed?.revoked?.by, "bob");
  assert.equal((await acquireClaim(client, keys, name, { jobId: "k", workerId: "w-3" }, timing)).status, "held");
  assert.equal(
    (await acquireClaim(client, keys, name, { jobId: "j", workerId: "w-3" }, timing)).status,
    "held",
    "no takeover by the same job while its revoked attempt may still run",
  );
  assert.deepEqual(await refreshClaim(client, keys, name, current, 10_000), { status: "revoked" });
  const again = await forceReleaseClaim(clients, keys, { name, token: current, actor: "carol", reason: "twice" });
  assert.equal(again.status, "releasing");

  // The holder stops and releases: that acknowledges, and the name is free at once.
  assert.deepEqual(await releaseClaim(client, keys, name, current), { status: "acknowledged" });
  assert.equal(await client.exists(keys.claim(name), keys.claimMeta(name)), 0);
  assert.deepEqual(await client.zrange(keys.claimRegistry, "0", "-1"), []);
  assert.equal(await client.get(keys.claimFence(name)), "2", "the fence counter survives");
  assert.deepEqual(await refreshClaim(client, keys, name, current, 10_000), { status: "missing" });

  const missing = await forceReleaseClaim(clients, keys, { name, token: current, actor: "bob", reason: "again" });
  assert.equal(missing.status, "missing");

  const { entries } = await listAudit(client, keys);
  assert.deepEqual(
    entries.map((e) => [e.id, e.actor, e.action, e.result, e.reason, e.detail.outcome]),
    [
      [missing.auditId, "bob", "force-release", "refused", "again", "missing"],
      [again.auditId, "carol", "force-release", "refused", "twice", "releasing"],
      [released.auditId, "bob", "force-release", "done", "worker w-2 is gone", "released"],
      [refused.auditId, "alice", "force-release", "refused", "looked stuck", "not-owner"],
    ],
  );
  const [, , done, stale] = entries;
  assert.deepEqual(stale!.detail, {
    name,
    token: shown,
    currentToken: current,
    fence: 2,
    holder: {
      host: os.hostname(),
      pid: process.pid,
      workerId: "w-2",
      jobId: "j",
      runId: "r-2",
      rebuild: null,
      tenant: null,
    },
    outcome: "not-owner",
  });
  assert.equal(done!.detail.token, current);
  assert.equal(done!.detail.fence, 2);
  assert.ok(Math.abs(done!.at - Date.now()) < 5_000, "time of the action");
});

test("a force-released holder that never acknowledges keeps the claim taken until its release window ends", async () => {
  const keys = redisKeys(uniquePrefix());
  const name = claimName("f/window");
  const stopWithinMs = 700;
  const holder = tokenOf(
    await acquireClaim(client, keys, name, { jobId: "j", stopWithinMs }, { ttlMs: 1_000, refreshEveryMs: 300 }),
  );
  const released = await forceReleaseClaim(clients, keys, { name, token: holder, actor: "ops", reason: "gone" });
  assert.equal(released.status, "released");
  const window = released.status === "released" ? released.releaseWindowMs : 0;
  // Its remaining TTL, its declared stop time and the margin: the longest a live holder needs to
  // notice (at the latest at its own deadline) and stop its steps.
  assert.ok(
    window > stopWithinMs + FORCE_RELEASE_MARGIN_MS && window <= 1_000 + stopWithinMs + FORCE_RELEASE_MARGIN_MS,
    `release window ${window} ms`,
  );
  const pttl = await client.pttl(keys.claim(name));
  assert.ok(pttl > 0 && pttl <= window, `the marker lives for the window (${pttl} ms)`);
  assert.equal((await acquireClaim(client, keys, name, { jobId: "k" }, timing)).status, "held");
  await new Promise((r) => setTimeout(r, pttl + 50));
  const next = await acquireClaim(client, keys, name, { jobId: "k" }, timing);
  assert.equal(next.status, "acquired", "free once the window ran out");
  assert.deepEqual(
    await releaseClaim(client, keys, name, holder),
    { status: "not-owner" },
    "a late release frees nothing",
  );
});

test("force release validates its request before touching Redis", async () => {
  const keys = redisKeys(uniquePrefix());
  const name = claimName("f/x");
  await assert.rejects(
    forceReleaseClaim(clients, keys, { name: "f/x", token: "t", actor: "a", reason: "r" }),
    InvalidClaimNameError,
  );
  await assert.rejects(forceReleaseClaim(clients, keys, { name, token: "", actor: "a", reason: "r" }), /token/);
  await assert.rejects(forceReleaseClaim(clients, keys, { name, token: "t", actor: " ", reason: "r" }), /operator/);
  await assert.rejects(forceReleaseClaim(clients, keys, { name, token: "t", actor: "a", reason: "" }), /reason/);
  assert.equal(await client.exists(keys.auditLog), 0);
});
