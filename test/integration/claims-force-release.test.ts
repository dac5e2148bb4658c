/** Operator force release: compare-and-delete on the shown token, every attempt audited. */
import assert from "node:assert/strict";
import os from "node:os";
import { after, test } from "node:test";
import { listAudit } from "../../lib/audit/index";
import {
  acquireClaim,
  claimName,
  forceReleaseClaim,
  InvalidClaimNameError,
  listClaims,
  refreshClaim,
  type AcquireResult,
} from "../../lib/claims/index";
import { createRedis } from "../../lib/redis/client";
import { redisKeys } from "../../lib/redis/keys";
import { startTestRedis, uniquePrefix } from "../support/redis";

const server = await startTestRedis();
const client = createRedis(server.url, "worker");
after(() => client.disconnect());

const timing = { ttlMs: 10_000, refreshEveryMs: 1_000 };
const tokenOf = (result: AcquireResult) => (result.status === "acquired" ? result.token : assert.fail("not acquired"));
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
      [released.auditId, "bob", "force-release", "done", "worker w-2 is gone", "released"],
      [refused.auditId, "alice", "force-release", "refused", "looked stuck", "not-owner"],
    ],
  );
  const [, done, stale] = entries;
  assert.deepEqual(stale!.detail, {
    name,
    token: shown,
    currentToken: current,
    fence: 2,
    holder: { host: os.hostname(), pid: process.pid, workerId: "w-2", jobId: "j", runId: "r-2" },
    outcome: "not-owner",
  });
  assert.equal(done!.detail.token, current);
  assert.equal(done!.detail.fence, 2);
  assert.ok(Math.abs(done!.at - Date.now()) < 5_000, "time of the action");
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
