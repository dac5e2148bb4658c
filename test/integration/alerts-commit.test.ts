/**
 * The alert state's one writer against a real Redis: every branch of ALERTS_COMMIT (committed,
 * fenced out, state changed), two evaluators on one Redis (one leads, a transition is recorded
 * once), a stale leader refused after a newer one committed, and the claims census script.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { Queue } from "bullmq";
import { Redis } from "ioredis";
import { commitChanges, CONTENT_REFRESH_MS, planChanges, readAlertState } from "../../lib/alerts/commit";
import { AlertEvaluator } from "../../lib/alerts/evaluator";
import { EVALUATOR_CLAIM } from "../../lib/alerts/rules";
import { queueTestNotification } from "../../lib/alerts/test-notification";
import type { ActiveAlert } from "../../lib/alerts/types";
import { acquireClaim, claimName } from "../../lib/claims";
import { readClaimCensus } from "../../lib/claims/census";
import { parseDefinitions } from "../../lib/rebuilds/definitions";
import { queuePrefix, REBUILD_QUEUE } from "../../lib/rebuilds/queue";
import { redisKeys } from "../../lib/redis/keys";
import { startTestRedis, stopTestRedis, uniquePrefix, type TestRedis } from "../support/redis";

let server: TestRedis;
const clients: Redis[] = [];
const client = () => {
  const c = new Redis(server.url, { maxRetriesPerRequest: null });
  clients.push(c);
  return c;
};
before(async () => {
  server = await startTestRedis();
});
after(async () => {
  for (const c of clients) c.disconnect();
  await stopTestRedis(server);
});

const alert = (id: string): ActiveAlert => ({
  id,
  labels: { alertname: "skips", severity: "warning", rebuild: "r", tenant: "", claim: "c", service: "claimwatch" },
  annotations: { summary: id, description: "", link: "" },
  since: null,
});
const outcome = (...ids: string[]) => ({ active: ids.map(alert), pendingSet: {}, pendingDel: [], missed: [] });

test("ALERTS_COMMIT: commits from the state read; refuses a changed state and an older fence, writing nothing", async () => {
  const redis = client();
  const keys = redisKeys(uniquePrefix("commit"));
  const empty = await readAlertState(redis, keys);
  assert.equal(empty.version, 0);
  const changes = planChanges(empty, outcome("a"), {}, [], 100);
  assert.deepEqual(await commitChanges(redis, keys, 5, 0, changes), { status: "committed", version: 1 });
  const state = await readAlertState(redis, keys);
  assert.deepEqual([...state.firing.keys()], ["a"]);
  assert.equal(await redis.xlen(keys.alertsTransitions), 1);

  // A second evaluation of version 0 (computed before the first commit) is refused.
  assert.deepEqual(await commitChanges(redis, keys, 5, 0, changes), { status: "state-changed", version: 1 });
  // An older evaluator (fence 4) is refused even from the current version.
  const resolve = planChanges(state, outcome(), {}, [], 200);
  assert.deepEqual(await commitChanges(redis, keys, 4, 1, resolve), { status: "fenced-out", newestFence: 5 });
  assert.deepEqual([...(await readAlertState(redis, keys)).firing.keys()], ["a"]);
  assert.equal(await redis.xlen(keys.alertsTransitions), 1, "nothing written by refused commits");
  // A newer fence commits and becomes the bar.
  assert.equal((await commitChanges(redis, keys, 6, 1, resolve)).status, "committed");
  assert.equal(await redis.get(keys.alertsFence), "6");
  assert.equal((await readAlertState(redis, keys)).firing.size, 0);
});

test("an alert that keeps firing says what holds now: its annotations follow, its start and transitions stay", async () => {
  const redis = client();
  const keys = redisKeys(uniquePrefix("content"));
  const saying = (summary: string): ActiveAlert => ({
    ...alert("a"),
    annotations: { summary, description: "", link: "" },
  });
  const first = planChanges(
    await readAlertState(redis, keys),
    { ...outcome(), active: [saying("skipped 2 times")] },
    {},
    [],
    100,
  );
  assert.equal((await commitChanges(redis, keys, 1, 0, first)).status, "committed");

  // Within the minute: not rewritten (a stale claim's text changes every cycle; each write is a commit).
  const soon = planChanges(
    await readAlertState(redis, keys),
    { ...outcome(), active: [saying("skipped 3 times")] },
    {},
    [],
    200,
  );
  assert.deepEqual(soon.fire, []);

  const later = await readAlertState(redis, keys);
  const changes = planChanges(
    later,
    { ...outcome(), active: [saying("skipped 3 times")] },
    {},
    [],
    100 + CONTENT_REFRESH_MS,
  );
  assert.deepEqual(changes.transitions, [], "still firing: no new transition");
  assert.deepEqual(changes.deliveries, []);
  assert.equal((await commitChanges(redis, keys, 1, later.version, changes)).status, "committed");
  const stored = (await readAlertState(redis, keys)).firing.get("a");
  assert.equal(stored?.annotations.summary, "skipped 3 times");
  assert.equal(stored?.startsAt, 100, "it fired at 100 and has not fired again");
  assert.equal(await redis.xlen(keys.alertsTransitions), 1);

  // Nothing new to say: nothing to commit.
  const same = planChanges(
    await readAlertState(redis, keys),
    { ...outcome(), active: [saying("skipped 3 times")] },
    {},
    [],
    300 + 2 * CONTENT_REFRESH_MS,
  );
  assert.deepEqual(same.fire, []);
});

function definitionsWithAlerts() {
  const result = parseDefinitions(
    {
      rebuilds: { r: { output: "/srv/out/r", steps: [{ name: "s", run: ["true"] }] } },
      alerts: { evaluateEvery: "1s", rules: { skips: { atLeast: 1 }, workerMissing: false, redisUnsafe: false } },
    },
    "/srv/claimwatch.yaml",
  );
  assert.ok(result.ok);
  return result.definitions;
}

test("two evaluators on one Redis: one leads; a transition is recorded once; a stale leader is fenced out", async () => {
  const keys = redisKeys(uniquePrefix("eval"));
  const definitions = definitionsWithAlerts();
  const make = () => {
    const main = client();
    return new AlertEvaluator({
      main,
      claims: client(),
      keys,
      definitions,
      schedulers: new Queue(REBUILD_QUEUE, { connection: main, prefix: queuePrefix(keys) }),
      config: definitions.alerts!,
      publicOrigin: "http://127.0.0.1:3000",
      role: "worker",
    });
  };
  const [a, b] = [make(), make()];
  try {
    await Promise.all([a.tick(), b.tick()]);
    assert.equal([a, b].filter((e) => e.leading).length, 1, "exactly one leads");
    const claims = client();
    await claims.hset(keys.claimSkips, claimName("/srv/out/r"), "2");
    for (let i = 0; i < 3; i++) await Promise.all([a.tick(), b.tick()]);
    const redis = client();
    assert.equal(await redis.xlen(keys.alertsTransitions), 1);
    assert.equal(await redis.hlen(keys.alertsFiring), 1);

    // The leader is "paused": its claim is taken away and the other process takes over and commits.
    const [leader, other] = a.leading ? [a, b] : [b, a];
    await claims.del(keys.claim(EVALUATOR_CLAIM), keys.claimMeta(EVALUATOR_CLAIM));
    await other.tick();
    assert.ok(other.leading);
    assert.ok(other.fence! > leader.fence!);
    await claims.hdel(keys.claimSkips, claimName("/srv/out/r"));
    assert.equal((await other.tick()).status, "committed");
    // The old leader wakes up with the old fence and a condition that holds again: refused.
    await claims.hset(keys.claimSkips, claimName("/srv/out/r"), "5");
    const stale = await leader.evaluate();
    // Refused at commit (fenced out), or earlier if its keeper already saw the claim gone.
    assert.ok(["fenced-out", "not-leading"].includes(stale.status), stale.status);
    assert.equal(leader.leading, false);
    assert.equal(await redis.xlen(keys.alertsTransitions), 2, "firing + resolved only");
  } finally {
    await a.stop();
    await b.stop();
  }
});

test("a test notification is queued for a known receiver only", async () => {
  const redis = client();
  const keys = redisKeys(uniquePrefix("testnote"));
  const definitions = definitionsWithAlerts();
  const config = { ...definitions.alerts!, receivers: [{ slack: { webhookUrlEnv: "S" } }] };
  assert.deepEqual(await queueTestNotification(redis, keys, undefined, "slack", "op", "http://h"), {
    status: "not-configured",
  });
  assert.deepEqual(await queueTestNotification(redis, keys, config, "pager", "op", "http://h"), {
    status: "unknown-receiver",
    receivers: ["slack"],
  });
  const queued = await queueTestNotification(redis, keys, config, "slack", "op", "http://h");
  assert.equal(queued.status, "queued");
  assert.equal(await redis.zcard(keys.alertsOutbox), 1);
});

test("claims census: held claims with PTTL and holder in one script call; expired ones left out", async () => {
  const redis = client();
  const keys = redisKeys(uniquePrefix("census"));
  const empty = await readClaimCensus(redis, keys, undefined);
  assert.deepEqual(empty.claims, []);
  assert.ok(empty.serverTime > 0);
  for (const name of ["output:a", "output:b"]) {
    const grant = await acquireClaim(
      redis,
      keys,
      name,
      { workerId: "w1", rebuild: "x" },
      { ttlMs: 60_000, refreshEveryMs: 10_000 },
    );
    assert.equal(grant.status, "acquired");
  }
  await redis.del(keys.claim("output:b")); // expired, still in the registry
  await redis.hset(keys.claimSkips, "output:a", "4");
  const census = await readClaimCensus(redis, keys, new Set(["w2"]));
  assert.deepEqual(
    census.claims.map((c) => c.name),
    ["output:a"],
  );
  const [a] = census.claims;
  assert.ok(a!.pttlMs > 0 && a!.pttlMs <= 60_000);
  assert.equal(a!.holder.workerId, "w1");
  assert.equal(a!.holder.rebuild, "x");
  assert.deepEqual(a!.stale, [{ kind: "holder-not-live", workerId: "w1" }]);
  assert.equal(census.skips.get("output:a"), 4);
});

test("stale claims census: exactly the full census' stale claims (overdue, near-stale, dead or escaped holder, revoked, no metadata)", async () => {
  const redis = client();
  const keys = redisKeys(uniquePrefix("stale-census"));
  const timing = { ttlMs: 600_000, refreshEveryMs: 10_000 };
  const grant = async (name: string, workerId: string) => {
    const granted = await acquireClaim(redis, keys, name, { workerId, rebuild: "r" }, timing);
    assert.equal(granted.status, "acquired");
    return granted.status === "acquired" ? granted.token : "";
  };
  const [seconds] = await redis.time();
  const now = Number(seconds) * 1000;
  const refreshedAgo = (name: string, ms: number) => redis.hset(keys.claimMeta(name), "refreshedAt", String(now - ms));
  await grant("output:healthy", "w1");
  await grant("output:overdue", "w1");
  await refreshedAgo("output:overdue", 25_000); // more than two intervals
  await grant("output:near", "w1");
  await refreshedAgo("output:near", 15_000); // stale in 5 s, not yet
  await grant("output:dead", "gone");
  await grant("output:nobody", "");
  const revokedToken = await grant("output:revoked", "gone");
  await redis.set(keys.claim("output:revoked"), `revoked!${revokedToken}`, "PX", 60_000); // another owner: an operator
  await redis.hset(keys.claimMeta("output:revoked"), "revokedBy", "op", "revokedAt", String(now));
  await grant("output:revoked-live", "w1");
  await redis.set(keys.claim("output:revoked-live"), "revoked!x", "PX", 60_000);
  await grant("output:no-meta", "gone");
  await redis.del(keys.claimMeta("output:no-meta"));
  await grant("output:escaped", "w1");
  await redis.hset(keys.claimMeta("output:escaped"), "holder", JSON.stringify({ workerId: 'w1"x', host: "h" }));
  await grant("output:no-worker-entry", "w1");
  await redis.hset(keys.claimMeta("output:no-worker-entry"), "holder", JSON.stringify({ host: "h" }));
  await grant("output:bad-number", "w1");
  await redis.hset(keys.claimMeta("output:bad-number"), "refreshEveryMs", "0b1", "refreshedAt", String(now - 60_000));
  await grant("output:garbage", "w1");
  await redis.hset(keys.claimMeta("output:garbage"), "refreshEveryMs", "soon", "refreshedAt", String(now - 60_000));

  const live = new Set(["w1"]);
  const full = await readClaimCensus(redis, keys, live);
  const stale = await readClaimCensus(redis, keys, live, { onlyStale: true });
  // PTTL and the time since the last refresh move between the two calls; the rest must not.
  const strip = ({ pttlMs: _pttl, stale, ...claim }: (typeof full.claims)[number]) => ({
    ...claim,
    stale: stale.map((reason) => (reason.kind === "refresh-overdue" ? { ...reason, sinceRefreshMs: 0 } : reason)),
  });
  assert.deepEqual(stale.claims.map(strip), full.claims.filter((claim) => claim.stale.length > 0).map(strip));
  assert.deepEqual(stale.claims.map((claim) => claim.name).sort(), [
    "output:bad-number", // "0b1": a number to JS, not to Lua, so the script returns it
    "output:dead",
    "output:escaped",
    "output:overdue",
    "output:revoked",
  ]);
  assert.ok(!full.claims.some((claim) => claim.name === "output:no-meta"));
  await assert.rejects(readClaimCensus(redis, keys, undefined, { onlyStale: true }));
});

test("Alertmanager re-posts: a failed one shows on the receiver's status, the next one that lands clears it", async () => {
  const { OutboxPump } = await import("../../lib/alerts/outbox");
  const { startHttpReceiver } = await import("../support/http-receiver");
  const receiver = await startHttpReceiver();
  const main = client();
  const keys = redisKeys(uniquePrefix("repost"));
  const firing = {
    id: "skips|c",
    labels: alert("a").labels,
    annotations: alert("a").annotations,
    startsAt: Date.now(),
  };
  await main.hset(keys.alertsFiring, firing.id, JSON.stringify(firing));
  const pump = new OutboxPump(
    main,
    keys,
    [{ kind: "alertmanager", name: "am", url: receiver.url }],
    { repeatEvery: 50 },
    process.env,
    () => {},
  );
  const statusAfterPump = async () => {
    await new Promise((r) => setTimeout(r, 60)); // past repeatEvery
    await pump.pump(() => true);
    await pump.settled();
    return JSON.parse((await main.hget(keys.alertsReceivers, "am")) ?? "null") as {
      status: string;
      error: string | null;
    };
  };
  receiver.setMode("/api/v2/alerts", "fail");
  assert.equal((await statusAfterPump()).status, "failed");
  receiver.setMode("/api/v2/alerts", "ok");
  const back = await statusAfterPump();
  assert.deepEqual([back.status, back.error], ["delivered", null]);
  assert.ok(receiver.requests.filter((r) => r.path === "/api/v2/alerts").length >= 2);
});
