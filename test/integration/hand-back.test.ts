/**
 * A job fetched by a worker that is already stopping goes back to waiting as if never fetched
 * (`handBackUnstarted`): the attempt BullMQ counted at the fetch is taken back, once per fetch —
 * also when the reply to that call is lost and ioredis sends it again — and only while the
 * fetching worker still holds the job's lock.
 */
import assert from "node:assert/strict";
import { after, test } from "node:test";
import { Queue, Worker } from "bullmq";
import { closeRedis, createRedis } from "../../lib/redis/client";
import { redisKeys } from "../../lib/redis/keys";
import { handBackUnstarted, queuePrefix, REBUILD_QUEUE } from "../../lib/rebuilds/queue";
import { UNCOUNT_UNSTARTED } from "../../lib/rebuilds/scripts";
import { runScript } from "../../lib/redis/scripts";
import { replyLosingClient } from "../support/reply-losing";
import { startTestRedis, stopTestRedis, uniquePrefix } from "../support/redis";

const server = await startTestRedis();
const main = createRedis(`redis://127.0.0.1:${server.port}`, "worker");
const keys = redisKeys(uniquePrefix("handback"));
const queue = new Queue(REBUILD_QUEUE, { connection: main, prefix: queuePrefix(keys) });
// No processor: jobs are fetched by hand, each fetch with its own lock token.
const fetcher = new Worker(REBUILD_QUEUE, null, { connection: main, prefix: queuePrefix(keys), lockDuration: 30_000 });
after(async () => {
  await fetcher.close();
  await queue.close();
  await closeRedis(main);
  await stopTestRedis(server);
});

/** Adds a job and fetches it `times` times (each fetch but the last handed back with BullMQ's own moveToWait). */
async function fetchedTimes(name: string, times: number) {
  await queue.add(name, { n: name }, { jobId: name });
  for (let i = 1; ; i++) {
    const token = `${name}-fetch-${i}`;
    const job = await fetcher.getNextJob(token);
    assert.ok(job && job.id === name, `fetch ${i} of ${name}`);
    if (i === times) return { job, token };
    await job.moveToWait(token);
  }
}

test("a job fetched once and handed back unstarted waits with no attempt counted", async () => {
  const { job, token } = await fetchedTimes("once", 1);
  assert.equal(job.attemptsStarted, 1, "BullMQ counted the fetch");
  assert.deepEqual(await handBackUnstarted(main, job, fetcher.toKey(job.id!), token), { kind: "handed-back" });
  const after = await queue.getJob("once");
  assert.equal(await after?.getState(), "waiting");
  assert.equal(after?.attemptsStarted, 0);
  await after?.remove(); // out of the way of the next tests' fetches
});

test("a lost reply resent: the attempt is taken back once, not twice (a job that had started before keeps that start)", async () => {
  const { job, token } = await fetchedTimes("resent", 2);
  assert.equal(job.attemptsStarted, 2);
  const lossy = await replyLosingClient(server.port, token);
  try {
    assert.deepEqual(await handBackUnstarted(lossy.main, job, fetcher.toKey(job.id!), token), { kind: "handed-back" });
    assert.ok(lossy.cut(), "the first reply was dropped and the call sent again");
  } finally {
    await lossy.close();
  }
  const after = await queue.getJob("resent");
  assert.equal(await after?.getState(), "waiting");
  assert.equal(after?.attemptsStarted, 1, "one start taken back: the earlier fetch still counts");
  await after?.remove();
});

test("a lock that is not the token's any more: nothing changes, the job is not moved", async () => {
  const { job, token } = await fetchedTimes("stale", 1);
  assert.deepEqual(await handBackUnstarted(main, job, fetcher.toKey(job.id!), `${token}-not-mine`), {
    kind: "not-ours",
  });
  const after = await queue.getJob("stale");
  assert.equal(await after?.getState(), "active");
  assert.equal(after?.attemptsStarted, 1);
  await job.moveToWait(token);
  await (await queue.getJob("stale"))?.remove();
});

test("a lock that ran out: nothing changes, the outcome says the lock is gone (not another fetch's)", async () => {
  const { job, token } = await fetchedTimes("lock-gone", 1);
  await main.del(`${fetcher.toKey(job.id!)}:lock`); // as when lockDuration passes with no renewal
  assert.deepEqual(await handBackUnstarted(main, job, fetcher.toKey(job.id!), token), { kind: "lock-gone" });
  const after = await queue.getJob("lock-gone");
  assert.equal(await after?.getState(), "active", "left to the stalled check");
  assert.equal(after?.attemptsStarted, 1, "the fetch's attempt stays counted");
  await main.set(`${fetcher.toKey(job.id!)}:lock`, token);
  await job.moveToWait(token);
  await (await queue.getJob("lock-gone"))?.remove();
});

test("a resend after the lock ran out still answers taken back, and takes back nothing more", async () => {
  const { job, token } = await fetchedTimes("resend-after-expiry", 2);
  const jobKey = fetcher.toKey(job.id!);
  assert.equal(await runScript(main, UNCOUNT_UNSTARTED, [`${jobKey}:lock`, jobKey], [token, "call-1"]), 1);
  await main.del(`${jobKey}:lock`); // the reply was lost, and the lock ran out before the resend
  assert.equal(await runScript(main, UNCOUNT_UNSTARTED, [`${jobKey}:lock`, jobKey], [token, "call-1"]), 1);
  assert.equal((await queue.getJob("resend-after-expiry"))?.attemptsStarted, 1, "one start taken back, once");
  // A new call (another id) with no lock: nothing changes.
  assert.equal(await runScript(main, UNCOUNT_UNSTARTED, [`${jobKey}:lock`, jobKey], [token, "call-2"]), -2);
  assert.equal((await queue.getJob("resend-after-expiry"))?.attemptsStarted, 1);
  await main.set(`${jobKey}:lock`, token);
  await job.moveToWait(token);
  await (await queue.getJob("resend-after-expiry"))?.remove();
});

test("two fetches with one token (BullMQ reuses a slot's token for its next fetch): each is taken back", async () => {
  await queue.add("same-token", { n: 1 }, { jobId: "same-token" });
  for (let i = 0; i < 2; i++) {
    const job = await fetcher.getNextJob("slot-token");
    assert.ok(job && job.id === "same-token", `fetch ${i + 1}`);
    assert.deepEqual(await handBackUnstarted(main, job, fetcher.toKey(job.id!), "slot-token"), { kind: "handed-back" });
  }
  const after = await queue.getJob("same-token");
  assert.equal(await after?.getState(), "waiting");
  assert.equal(after?.attemptsStarted, 0);
  await after?.remove();
});

test("taken back but not moved (the move to waiting failed): the outcome says so, the job stays active under its lock", async () => {
  const { job, token } = await fetchedTimes("not-moved", 1);
  const failingMove = { moveToWait: () => Promise.reject(new Error("connection is closed")) };
  const outcome = await handBackUnstarted(main, failingMove, fetcher.toKey(job.id!), token);
  assert.deepEqual(outcome, { kind: "not-moved", error: "Error: connection is closed" });
  const after = await queue.getJob("not-moved");
  assert.equal(await after?.getState(), "active", "the stalled check hands it back once the lock runs out");
  assert.equal(after?.attemptsStarted, 0, "the fetch's attempt was taken back");
  await job.moveToWait(token);
  await (await queue.getJob("not-moved"))?.remove();
});
