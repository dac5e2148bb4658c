/**
 * Issue 15, claim trail: every claim name keeps a bounded history — acquired, refreshed late,
 * released, expired without release (with the last holder), taken over, force-released (by whom,
 * why), stopped after a force release — written by the claim scripts themselves.
 */
import assert from "node:assert/strict";
import { after, test } from "node:test";
import {
  acquireClaim,
  claimName,
  forceReleaseClaim,
  listClaims,
  readClaimTrail,
  readEndedClaims,
  refreshClaim,
  releaseClaim,
  type AcquireResult,
  type TrailEntry,
} from "../../lib/claims/index";
import { createRedis } from "../../lib/redis/client";
import { redisKeys } from "../../lib/redis/keys";
import { TRAIL_MAX } from "../../lib/redis/scripts";
import { startTestRedis, uniquePrefix } from "../support/redis";

const server = await startTestRedis();
const client = createRedis(server.url, "worker");
after(() => client.disconnect());

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const tokenOf = (result: AcquireResult) => (result.status === "acquired" ? result.token : assert.fail("not acquired"));
const kinds = (entries: TrailEntry[]) => entries.map((e) => e.kind);

test("acquired and released, with the holder, fence and how long it was held; the ended list has it", async () => {
  const keys = redisKeys(uniquePrefix());
  const name = claimName("t/plain", "acme");
  const meta = { jobId: "j1", workerId: "w-1", runId: "run-1-a1", rebuild: "plain", tenant: "acme", version: "v1" };
  const token = tokenOf(await acquireClaim(client, keys, name, meta, { ttlMs: 5_000, refreshEveryMs: 1_000 }));
  assert.deepEqual(await refreshClaim(client, keys, name, token, 5_000), { status: "refreshed" });
  assert.deepEqual(await releaseClaim(client, keys, name, token), { status: "released" });

  const trail = await readClaimTrail(client, keys, name);
  assert.deepEqual(kinds(trail), ["released", "acquired"], "an on-time refresh is not written");
  const [released, acquired] = trail;
  assert.equal(acquired!.holder.workerId, "w-1");
  assert.equal(acquired!.holder.runId, "run-1-a1");
  assert.equal(acquired!.holder.version, "v1");
  assert.equal(acquired!.fence, 1);
  assert.equal(acquired!.ms, 5_000, "the TTL it was acquired with");
  assert.equal(released!.fence, 1);
  assert.ok(released!.ms !== null && released!.ms >= 0, "held for");
  assert.ok(released!.at >= acquired!.at);
  const ended = await readEndedClaims(client, keys);
  assert.deepEqual(
    ended.map((e) => [e.kind, e.name, e.fence, e.holder.workerId]),
    [["released", name, 1, "w-1"]],
  );
});

test("a late refresh is written with the gap", async () => {
  const keys = redisKeys(uniquePrefix());
  const name = claimName("t/late");
  const token = tokenOf(
    await acquireClaim(client, keys, name, { workerId: "w-2" }, { ttlMs: 2_000, refreshEveryMs: 100 }),
  );
  await sleep(350);
  assert.deepEqual(await refreshClaim(client, keys, name, token, 2_000), { status: "refreshed" });
  const [late] = await readClaimTrail(client, keys, name);
  assert.equal(late!.kind, "refreshed-late");
  assert.ok(late!.ms !== null && late!.ms >= 300, `gap ${late!.ms} ms`);
  assert.equal(late!.holder.workerId, "w-2");
});

test("a claim that expires without release: the reader says so at once; the next acquire writes it with the last holder", async () => {
  const keys = redisKeys(uniquePrefix());
  const name = claimName("t/expired");
  tokenOf(
    await acquireClaim(
      client,
      keys,
      name,
      { jobId: "a", workerId: "w-dead", runId: "run-a-a1" },
      { ttlMs: 200, refreshEveryMs: 50 },
    ),
  );
  await sleep(300);
  const seen = await readClaimTrail(client, keys, name);
  assert.equal(seen[0]!.kind, "expired");
  assert.equal(seen[0]!.derived, true, "nothing wrote it yet: the reader derived it");
  assert.equal(seen[0]!.holder.workerId, "w-dead");

  tokenOf(
    await acquireClaim(client, keys, name, { jobId: "b", workerId: "w-new" }, { ttlMs: 5_000, refreshEveryMs: 1_000 }),
  );
  const trail = await readClaimTrail(client, keys, name);
  assert.deepEqual(kinds(trail), ["acquired", "expired", "acquired"]);
  assert.equal(trail[1]!.derived, undefined, "written by the acquire that found the name free");
  assert.equal(trail[1]!.holder.workerId, "w-dead", "with the last holder");
  assert.equal(trail[1]!.fence, 1);
  assert.equal(trail[0]!.fence, 2);
  const [ended] = await readEndedClaims(client, keys);
  assert.deepEqual([ended!.kind, ended!.holder.runId], ["expired", "run-a-a1"]);
});

test("the Claims page's registry pruning writes the expiry too (once)", async () => {
  const keys = redisKeys(uniquePrefix());
  const name = claimName("t/pruned");
  const token = tokenOf(
    await acquireClaim(client, keys, name, { workerId: "w-3" }, { ttlMs: 200, refreshEveryMs: 50 }),
  );
  await sleep(300);
  assert.equal((await listClaims(client, keys)).pruned, 1);
  assert.deepEqual(kinds(await readClaimTrail(client, keys, name)), ["expired", "acquired"]);
  // A late release by the old holder, and another prune, add nothing.
  assert.deepEqual(await releaseClaim(client, keys, name, token), { status: "missing" });
  await listClaims(client, keys);
  assert.deepEqual(kinds(await readClaimTrail(client, keys, name)), ["expired", "acquired"]);
});

test("a takeover by the same job's next attempt, and a force release with its holder stopping", async () => {
  const keys = redisKeys(uniquePrefix());
  const name = claimName("t/forced");
  const timing = { ttlMs: 5_000, refreshEveryMs: 1_000 };
  tokenOf(await acquireClaim(client, keys, name, { jobId: "j", workerId: "w-old", runId: "run-j-a1" }, timing));
  const second = tokenOf(
    await acquireClaim(client, keys, name, { jobId: "j", workerId: "w-new", runId: "run-j-a2" }, timing),
  );
  const released = await forceReleaseClaim({ claims: client, audit: client }, keys, {
    name,
    token: second,
    actor: "alice",
    reason: "stuck at 02:00",
  });
  assert.equal(released.status, "released");
  assert.deepEqual(await releaseClaim(client, keys, name, second), { status: "acknowledged" });

  const trail = await readClaimTrail(client, keys, name);
  assert.deepEqual(kinds(trail), ["stopped", "force-released", "acquired", "taken-over", "acquired"]);
  const [stopped, forced, , takenOver] = trail;
  assert.deepEqual([takenOver!.holder.workerId, takenOver!.by, takenOver!.fence], ["w-old", "w-new", 1]);
  assert.deepEqual(
    [forced!.by, forced!.reason, forced!.fence, forced!.holder.runId],
    ["alice", "stuck at 02:00", 2, "run-j-a2"],
  );
  assert.ok(forced!.ms !== null && forced!.ms > 0, "the release window");
  assert.equal(stopped!.fence, 2);
  assert.deepEqual(kinds(await readEndedClaims(client, keys)), ["stopped", "taken-over"]);
});

test("a force-released holder that never acknowledges: the expiry says the window ran out", async () => {
  const keys = redisKeys(uniquePrefix());
  const name = claimName("t/window");
  const token = tokenOf(
    await acquireClaim(client, keys, name, { workerId: "w-frozen" }, { ttlMs: 200, refreshEveryMs: 50 }),
  );
  await forceReleaseClaim({ claims: client, audit: client }, keys, { name, token, actor: "bob", reason: "frozen" });
  const pttl = await client.pttl(keys.claim(name));
  await sleep(pttl + 50);
  tokenOf(await acquireClaim(client, keys, name, { workerId: "w-next" }, { ttlMs: 5_000, refreshEveryMs: 1_000 }));
  const [, expired] = await readClaimTrail(client, keys, name);
  assert.equal(expired!.kind, "expired");
  assert.match(expired!.reason ?? "", /never acknowledged/);
  assert.equal(expired!.holder.workerId, "w-frozen");
});

test("a housekeeping claim (trail: false) force-released and acknowledged: its trail says it stopped, nothing derived", async () => {
  const keys = redisKeys(uniquePrefix());
  const name = claimName("t/pruner-forced");
  const timing = { ttlMs: 5_000, refreshEveryMs: 1_000 };
  const token = tokenOf(await acquireClaim(client, keys, name, { workerId: "w-pruner", trail: false }, timing));
  await forceReleaseClaim({ claims: client, audit: client }, keys, {
    name,
    token,
    actor: "carol",
    reason: "in my way",
  });
  assert.deepEqual(await releaseClaim(client, keys, name, token), { status: "acknowledged" });
  const free = await readClaimTrail(client, keys, name);
  assert.deepEqual(kinds(free), ["stopped", "force-released"]);
  assert.equal(free[0]!.derived, undefined, "written by the acknowledgement, not derived by the reader");
  assert.equal(free[0]!.holder.workerId, "w-pruner");
  tokenOf(await acquireClaim(client, keys, name, { workerId: "w-next" }, timing));
  assert.deepEqual(kinds(await readClaimTrail(client, keys, name)), ["acquired", "stopped", "force-released"]);
  assert.deepEqual(kinds(await readEndedClaims(client, keys)), ["stopped"]);
});

test("housekeeping claims (trail: false) write no trail, but still note a run's expired claim", async () => {
  const keys = redisKeys(uniquePrefix());
  const name = claimName("t/house");
  tokenOf(await acquireClaim(client, keys, name, { workerId: "w-run" }, { ttlMs: 200, refreshEveryMs: 50 }));
  await sleep(300);
  const pruner = tokenOf(
    await acquireClaim(
      client,
      keys,
      name,
      { workerId: "w-pruner", trail: false },
      { ttlMs: 5_000, refreshEveryMs: 1_000 },
    ),
  );
  assert.deepEqual(await releaseClaim(client, keys, name, pruner), { status: "released" });
  assert.deepEqual(kinds(await readClaimTrail(client, keys, name)), ["expired", "acquired"]);
});

test("bounded: a thousand grants keep the trail and the ended list capped", async () => {
  const keys = redisKeys(uniquePrefix());
  const name = claimName("t/busy");
  for (let i = 0; i < 1_000; i++) {
    const token = tokenOf(
      await acquireClaim(client, keys, name, { workerId: "w" }, { ttlMs: 5_000, refreshEveryMs: 1_000 }),
    );
    await releaseClaim(client, keys, name, token);
  }
  // MAXLEN ~ trims whole stream nodes (100 entries each): about the cap, never the thousands.
  const length = await client.xlen(keys.claimTrail(name));
  assert.ok(length >= TRAIL_MAX && length <= TRAIL_MAX + 100, `trail length ${length}`);
  const ended = await client.xlen(keys.claimsEnded);
  assert.ok(ended <= 200 + 100, `ended length ${ended}`);
  assert.equal((await readClaimTrail(client, keys, name)).length, TRAIL_MAX);
});
