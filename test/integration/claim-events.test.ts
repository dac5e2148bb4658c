/**
 * A claim's live events (lib/events) are written by its own scripts: the grant's
 * `claim.acquired` (with the fence and time only the grant knows, and whom it took over from),
 * each refresh's `claim.refreshed` and the release's `claim.released` are one atomic write with
 * the change they report, in its round trip. A damaged stream never fails the claim.
 */
import assert from "node:assert/strict";
import { after, test } from "node:test";
import { acquireClaim, claimName, refreshClaim, releaseClaim, withClaim } from "../../lib/claims/index";
import { decodeEntry } from "../../lib/events/publish";
import type { StoredEvent } from "../../lib/events/types";
import { createRedis } from "../../lib/redis/client";
import { redisKeys, type RedisKeys } from "../../lib/redis/keys";
import { startTestRedis, uniquePrefix } from "../support/redis";

const server = await startTestRedis();
const client = createRedis(server.url, "worker");
after(() => client.disconnect());

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const timing = { ttlMs: 2_000, refreshEveryMs: 100 };

async function events(keys: RedisKeys): Promise<StoredEvent[]> {
  const entries = await client.xrange(keys.events, "-", "+");
  return entries.map(([, fields]) => decodeEntry(fields)).filter((e): e is StoredEvent => e !== null);
}

/** Commands the client sends while `fn` runs (ioredis sends each command through sendCommand). */
async function commandsDuring(fn: () => Promise<unknown>): Promise<string[]> {
  const sent: string[] = [];
  const original = client.sendCommand.bind(client);
  client.sendCommand = ((command: { name: string }, ...rest: unknown[]) => {
    sent.push(command.name);
    return (original as (...args: unknown[]) => unknown)(command, ...rest);
  }) as typeof client.sendCommand;
  try {
    await fn();
  } finally {
    client.sendCommand = original;
  }
  return sent;
}

test("withClaim: acquired (fence, time, no takeover), refreshed, released, in order, from the claim's scripts", async () => {
  const keys = redisKeys(uniquePrefix());
  const name = claimName("events/plain", "t1");
  const meta = { workerId: "w-1", jobId: "job-1", runId: "run-1", rebuild: "events", tenant: "t1", version: "v1" };
  const result = await withClaim(client, keys, name, meta, () => sleep(450), timing);
  assert.equal(result.status, "done");
  if (result.status !== "done") return;
  const seen = await events(keys);
  const types = seen.map((e) => e.type);
  assert.equal(types[0], "claim.acquired");
  assert.equal(types.at(-1), "claim.released");
  assert.ok(types.filter((t) => t === "claim.refreshed").length >= 2, `refreshes in ${types.join(", ")}`);
  assert.deepEqual(
    types.slice(1, -1).filter((t) => t !== "claim.refreshed"),
    [],
    `only refreshes between: ${types.join(", ")}`,
  );
  const acquired = seen[0] as Extract<StoredEvent, { type: "claim.acquired" }>;
  const now = await redisNowMs();
  assert.equal(acquired.token, result.token);
  assert.equal(acquired.fence, result.fence);
  assert.equal(acquired.tookOverFrom, null);
  assert.equal(typeof acquired.acquiredAt, "number");
  assert.ok(Math.abs(acquired.acquiredAt - now) < 60_000, "acquiredAt is the claims server's time");
  assert.equal(acquired.ttlMs, timing.ttlMs);
  assert.equal(acquired.refreshEveryMs, timing.refreshEveryMs);
  assert.deepEqual([acquired.name, acquired.rebuild, acquired.tenant, acquired.version], [name, "events", "t1", "v1"]);
  assert.deepEqual(
    [acquired.holder.workerId, acquired.holder.jobId, acquired.holder.runId, acquired.holder.pid],
    ["w-1", "job-1", "run-1", process.pid],
  );
  for (const event of seen.slice(1)) {
    assert.equal((event as { token: string }).token, result.token);
    assert.equal((event as { name: string }).name, name);
  }
  assert.deepEqual(seen.at(-1), { type: "claim.released", name, token: result.token, forcedBy: null });
});

async function redisNowMs(): Promise<number> {
  const [seconds, micros] = await client.time();
  return Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
}

test("a takeover's claim.acquired names the attempt it took over from (its token and fence)", async () => {
  const keys = redisKeys(uniquePrefix());
  const name = claimName("events/takeover");
  const first = await acquireClaim(client, keys, name, { jobId: "job-7", attempt: 1 }, timing, { liveEvent: true });
  assert.equal(first.status, "acquired");
  if (first.status !== "acquired") return;
  const second = await acquireClaim(client, keys, name, { jobId: "job-7", attempt: 2 }, timing, { liveEvent: true });
  assert.equal(second.status, "acquired");
  if (second.status !== "acquired") return;
  const [a, b] = (await events(keys)) as Array<Extract<StoredEvent, { type: "claim.acquired" }>>;
  assert.equal(a?.tookOverFrom, null);
  assert.deepEqual(b?.tookOverFrom, { token: first.token, fence: first.fence });
  assert.equal(b?.fence, second.fence);
  assert.equal(b?.acquiredAt, second.acquiredAt);
});

test("acquire, refresh and release each send one command, and their event is there when it answers", async () => {
  const keys = redisKeys(uniquePrefix());
  const name = claimName("events/one-trip");
  let token = "";
  const acquireSent = await commandsDuring(async () => {
    const grant = await acquireClaim(client, keys, name, {}, timing, { liveEvent: true });
    assert.equal(grant.status, "acquired");
    if (grant.status === "acquired") token = grant.token;
  });
  assert.equal(acquireSent.length, 1, `acquire sent ${acquireSent.join(", ")}`);
  assert.deepEqual(
    (await events(keys)).map((e) => e.type),
    ["claim.acquired"],
  );

  const refreshSent = await commandsDuring(async () => {
    assert.equal(
      (await refreshClaim(client, keys, name, token, timing.ttlMs, { liveEvent: true })).status,
      "refreshed",
    );
  });
  assert.equal(refreshSent.length, 1, `refresh sent ${refreshSent.join(", ")}`);
  assert.deepEqual((await events(keys)).at(-1), { type: "claim.refreshed", name, token, ttlMs: timing.ttlMs });

  const releaseSent = await commandsDuring(async () => {
    assert.equal((await releaseClaim(client, keys, name, token, { liveEvent: true })).status, "released");
  });
  assert.equal(releaseSent.length, 1, `release sent ${releaseSent.join(", ")}`);
  assert.deepEqual((await events(keys)).at(-1), { type: "claim.released", name, token, forcedBy: null });
});

test("no event for a claim held by another, a refused refresh or release, or without liveEvent", async () => {
  const keys = redisKeys(uniquePrefix());
  const name = claimName("events/refused");
  const quiet = await acquireClaim(client, keys, name, { jobId: "a" }, timing);
  assert.equal(quiet.status, "acquired");
  const held = await acquireClaim(client, keys, name, { jobId: "b" }, timing, { liveEvent: true });
  assert.equal(held.status, "held");
  assert.equal(
    (await refreshClaim(client, keys, name, "someone:1:else", timing.ttlMs, { liveEvent: true })).status,
    "not-owner",
  );
  assert.equal((await releaseClaim(client, keys, name, "someone:1:else", { liveEvent: true })).status, "not-owner");
  if (quiet.status === "acquired")
    assert.equal((await releaseClaim(client, keys, name, quiet.token)).status, "released");
  assert.deepEqual(await events(keys), []);
});

test("a damaged events key never fails a claim: acquire, refresh and release still work", async () => {
  const keys = redisKeys(uniquePrefix());
  const name = claimName("events/damaged");
  await client.set(keys.events, "not a stream");
  const result = await withClaim(client, keys, name, { jobId: "j" }, () => sleep(250), timing);
  assert.equal(result.status, "done");
  if (result.status !== "done") return;
  assert.equal(result.release.status, "released");
  assert.equal(result.claimLost, null);
  assert.equal(await client.exists(keys.claim(name)), 0);
  assert.equal(await client.get(keys.events), "not a stream", "the damaged key is left as it was");
});
