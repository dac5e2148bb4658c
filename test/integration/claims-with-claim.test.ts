/**
 * withClaim: refresh loop, abort on loss (superseded, expired, local deadline), release in
 * finally, and what the caller gets back.
 */
import assert from "node:assert/strict";
import { once } from "node:events";
import { after, test } from "node:test";
import {
  acquireClaim,
  ClaimLostError,
  claimName,
  forceReleaseClaim,
  publishFenced,
  readPublished,
  withClaim,
  type HeldClaim,
  type WithClaimEvent,
} from "../../lib/claims/index";
import { createRedis } from "../../lib/redis/client";
import { redisKeys } from "../../lib/redis/keys";
import { startTestRedis, uniquePrefix } from "../support/redis";

const server = await startTestRedis();
const client = createRedis(server.url, "worker");
after(() => client.disconnect());

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Work that runs until its claim is lost, then throws the abort reason (as real work does). */
async function untilAborted(claim: HeldClaim): Promise<never> {
  if (!claim.signal.aborted) await once(claim.signal, "abort");
  throw claim.signal.reason;
}

function isLoss(cause: string | string[]) {
  const causes = Array.isArray(cause) ? cause : [cause];
  return (error: unknown) => {
    assert.ok(error instanceof ClaimLostError, `expected ClaimLostError, got ${String(error)}`);
    assert.ok(causes.includes(error.cause), `cause ${error.cause}, expected ${causes.join(" or ")}`);
    return true;
  };
}

test("held: fn is not called and the holder is returned", async () => {
  const keys = redisKeys(uniquePrefix());
  const name = claimName("w/held");
  await acquireClaim(client, keys, name, { jobId: "other", workerId: "w-9" }, { ttlMs: 5_000, refreshEveryMs: 1_000 });
  let called = false;
  const result = await withClaim(
    client,
    keys,
    name,
    { jobId: "mine" },
    () => {
      called = true;
    },
    { ttlMs: 1_000, refreshEveryMs: 300 },
  );
  assert.equal(called, false);
  assert.equal(result.status, "held");
  assert.equal(result.status === "held" && result.holder.workerId, "w-9");
});

test("done: refreshes keep the claim past its TTL, then it is released", async () => {
  const keys = redisKeys(uniquePrefix());
  const name = claimName("w/long");
  const events: WithClaimEvent[] = [];
  let contender: string | undefined;
  const result = await withClaim(
    client,
    keys,
    name,
    { jobId: "j" },
    async (claim) => {
      assert.equal(await client.get(keys.claim(name)), claim.token);
      await sleep(1_000); // 2.5 × the TTL
      contender = (await acquireClaim(client, keys, name, { jobId: "k" }, { ttlMs: 400, refreshEveryMs: 200 })).status;
      claim.throwIfLost();
      assert.ok(claim.msUntilDeadline() > 0);
      return claim.fence * 10;
    },
    { ttlMs: 400, refreshEveryMs: 120, onEvent: (e) => events.push(e) },
  );
  assert.equal(contender, "held", "the claim outlived its TTL while refreshed");
  assert.equal(result.status, "done");
  if (result.status !== "done") return;
  assert.equal(result.value, 10);
  assert.equal(result.fence, 1);
  assert.equal(result.claimLost, null);
  assert.deepEqual(result.release, { status: "released" });
  assert.ok(events.filter((e) => e.type === "refreshed").length >= 5, "refreshed on its cadence");
  assert.equal(await client.exists(keys.claim(name), keys.claimMeta(name)), 0, "released in finally");
});

test("fn's own error is rethrown and the claim is still released", async () => {
  const keys = redisKeys(uniquePrefix());
  const name = claimName("w/fails");
  await assert.rejects(
    withClaim(
      client,
      keys,
      name,
      {},
      async () => {
        throw new Error("tiling failed");
      },
      { ttlMs: 1_000, refreshEveryMs: 300 },
    ),
    /tiling failed/,
  );
  assert.equal(await client.exists(keys.claim(name)), 0);
});

test("rejects refreshEveryMs > ttlMs / 2 without acquiring", async () => {
  const keys = redisKeys(uniquePrefix());
  const name = claimName("w/cadence");
  await assert.rejects(
    withClaim(client, keys, name, {}, () => 1, { ttlMs: 1_000, refreshEveryMs: 501 }),
    RangeError,
  );
  assert.equal(await client.exists(keys.claim(name)), 0);
});

test("takeover by a new attempt of the job: the running holder's signal aborts (superseded)", async () => {
  const keys = redisKeys(uniquePrefix());
  const name = claimName("w/takeover");
  let newFence = 0;
  const events: WithClaimEvent[] = [];
  const running = withClaim(
    client,
    keys,
    name,
    { jobId: "job-1" },
    async (claim) => {
      const retry = await acquireClaim(client, keys, name, { jobId: "job-1" }, { ttlMs: 5_000, refreshEveryMs: 1_000 });
      assert.equal(retry.status, "acquired");
      if (retry.status === "acquired") newFence = retry.fence;
      return untilAborted(claim);
    },
    { ttlMs: 1_000, refreshEveryMs: 150, onEvent: (e) => events.push(e) },
  );
  await assert.rejects(running, isLoss("superseded"));
  assert.equal(newFence, 2);
  assert.ok((await client.get(keys.claim(name)))?.length, "the new attempt's claim survives the old one's finally");
  const release = events.find((e) => e.type === "release-failed");
  assert.equal(release?.type === "release-failed" && release.outcome.status, "not-owner");
});

test("expired and re-taken: the old holder's refresh fails, its signal aborts, its fence is refused", async () => {
  const keys = redisKeys(uniquePrefix());
  const name = claimName("w/expired");
  let oldFence = 0;
  let publishAfterLoss: string | undefined;
  const running = withClaim(
    client,
    keys,
    name,
    { jobId: "run-a" },
    async (claim) => {
      oldFence = claim.fence;
      await client.pexpire(keys.claim(name), 1); // the claim expires under its holder…
      let retaken;
      do retaken = await acquireClaim(client, keys, name, { jobId: "run-b" }, { ttlMs: 5_000, refreshEveryMs: 1_000 });
      while (retaken.status !== "acquired"); // …and another run takes it
      await publishFenced(client, keys, { name, fence: retaken.fence, token: retaken.token, value: "build-b" });
      try {
        return await untilAborted(claim);
      } finally {
        publishAfterLoss = (
          await publishFenced(client, keys, { name, fence: claim.fence, token: claim.token, value: "build-a" })
        ).status;
      }
    },
    { ttlMs: 1_000, refreshEveryMs: 150 },
  );
  // `superseded` when the next refresh sees run-b's token; `expired` if it ran in the gap.
  await assert.rejects(running, isLoss(["superseded", "expired"]));
  assert.equal(publishAfterLoss, "superseded");
  const published = await readPublished(client, keys, name);
  assert.equal(published?.value, "build-b");
  assert.ok(published!.fence > oldFence);
});

test("force release while running: the holder aborts (force-released), and its release frees the claim", async () => {
  const keys = redisKeys(uniquePrefix());
  const name = claimName("w/forced");
  const running = withClaim(
    client,
    keys,
    name,
    {},
    async (claim) => {
      const result = await forceReleaseClaim({ claims: client, audit: client }, keys, {
        name,
        token: claim.token,
        actor: "ops",
        reason: "stuck",
      });
      assert.equal(result.status, "released");
      // Until this holder has stopped, nobody else gets the claim.
      assert.equal(
        (await acquireClaim(client, keys, name, { jobId: "other" }, { ttlMs: 1_000, refreshEveryMs: 300 })).status,
        "held",
      );
      return untilAborted(claim);
    },
    { ttlMs: 1_000, refreshEveryMs: 150 },
  );
  await assert.rejects(running, isLoss("force-released"));
  assert.equal(await client.exists(keys.claim(name)), 0, "the holder's release acknowledged: the name is free");
});

test("fn that ignores its signal still finishes, and the loss is reported with the value", async () => {
  const keys = redisKeys(uniquePrefix());
  const name = claimName("w/ignores");
  const result = await withClaim(
    client,
    keys,
    name,
    {},
    async (claim) => {
      await client.set(keys.claim(name), "other"); // another owner
      await sleep(400);
      assert.equal(claim.signal.aborted, true);
      return "late";
    },
    { ttlMs: 1_000, refreshEveryMs: 100 },
  );
  assert.equal(result.status, "done");
  if (result.status !== "done") return;
  assert.equal(result.value, "late");
  assert.equal(result.claimLost?.cause, "superseded");
  assert.deepEqual(result.release, { status: "not-owner" });
  assert.equal(await client.get(keys.claim(name)), "other");
});

test("a starved holder (timers late) learns of the passed deadline from throwIfLost()", async () => {
  const keys = redisKeys(uniquePrefix());
  const name = claimName("w/starved");
  const ttlMs = 300;
  const running = withClaim(
    client,
    keys,
    name,
    {},
    async (claim) => {
      const until = performance.now() + ttlMs + 50;
      while (performance.now() < until); // CPU starvation: no timer can fire
      assert.equal(claim.signal.aborted, false, "no timer ran yet");
      assert.ok(claim.msUntilDeadline() <= 0);
      assert.throws(() => claim.throwIfLost(), isLoss("deadline"));
      assert.equal(claim.signal.aborted, true);
      return "must not be returned";
    },
    { ttlMs, refreshEveryMs: 100 },
  );
  const result = await running;
  assert.equal(result.status === "done" && result.claimLost?.cause, "deadline");
});

test("Redis stopped while a claim is held: the local deadline aborts within TTL + one refresh", async () => {
  const lonely = await startTestRedis();
  const cutOff = createRedis(lonely.url, "worker"); // commands wait through reconnects, forever
  const keys = redisKeys(uniquePrefix());
  const name = claimName("w/cut-off");
  const ttlMs = 1_000;
  const refreshEveryMs = 450;
  let stoppedAt = 0;
  let abortedAt = 0;
  try {
    const running = withClaim(
      cutOff,
      keys,
      name,
      {},
      async (claim) => {
        claim.signal.addEventListener("abort", () => (abortedAt = performance.now()));
        await sleep(refreshEveryMs + 100); // one refresh succeeded
        stoppedAt = performance.now();
        await lonely.stop(2_000);
        return untilAborted(claim);
      },
      { ttlMs, refreshEveryMs, releaseTimeoutMs: 300 },
    );
    await assert.rejects(running, isLoss("deadline"));
    const elapsed = abortedAt - stoppedAt;
    console.log(
      `cut-off holder aborted ${elapsed.toFixed(0)} ms after Redis stopped (ttl ${ttlMs}, refresh ${refreshEveryMs})`,
    );
    assert.ok(abortedAt > stoppedAt, "aborted after the stop, not before");
    assert.ok(elapsed < ttlMs + refreshEveryMs, `aborted ${elapsed.toFixed(0)} ms after the stop`);
  } finally {
    cutOff.disconnect();
  }
});

/**
 * A holder whose refreshes reach Redis while its own refresh work (a `whenRefreshed` listener)
 * throws `listenerError`: the claim runs out at its deadline, and `work` sees the loss.
 */
function holdWithFailingRefreshWork(label: string, listenerError: Error, work: (claim: HeldClaim) => Promise<never>) {
  return withClaim(
    client,
    redisKeys(uniquePrefix()),
    claimName(label),
    { jobId: "j" },
    async (claim) => {
      claim.whenRefreshed(() => {
        throw listenerError;
      });
      return work(claim);
    },
    { ttlMs: 600, refreshEveryMs: 150 },
  );
}

test("refreshes that reach Redis while the holder's own refresh work fails (a read-only disk): the claim is lost at its deadline, and the loss says why", async () => {
  const readOnly = Object.assign(new Error("EROFS: read-only file system, utime '/out/builds/.holding-fence@1'"), {
    code: "EROFS",
  });
  await assert.rejects(holdWithFailingRefreshWork("w/listener", readOnly, untilAborted), (error: unknown) => {
    isLoss("deadline")(error);
    assert.match(
      (error as Error).message,
      /no refresh succeeded within the TTL; the refreshes reached Redis, but what each refresh must also do failed: EROFS: read-only file system/,
    );
    return true;
  });
});

test("work that tells more of its claim's loss (a ClaimLostError of its own: the stall the step warden saw) is what the caller gets", async () => {
  await assert.rejects(
    holdWithFailingRefreshWork("w/told", new Error("EROFS"), (claim) =>
      untilAborted(claim).catch((lost: ClaimLostError) => {
        throw new ClaimLostError(lost.claimName, lost.cause, lost.fence, "step s was killed by the step warden");
      }),
    ),
    /lost claim .*: no refresh succeeded within the TTL; step s was killed by the step warden$/,
  );
});
