/**
 * When a worker may judge another dead by its expired heartbeat (BEAT_STREAK,
 * lib/workers/heartbeat.ts): only once its own beats have come for a whole heartbeat TTL with no
 * gap over one and a half beat intervals (one refused beat starts it again). The streak lives in
 * the worker's heartbeat hash, on the Redis clock (WORKER_BEAT), and the close script
 * (RUN_ABANDON) checks the sweeper's streak, and that its last beat is recent
 * (BEAT_STREAK.freshMs), when it writes — so a sweep sent before a write outage and resent by
 * ioredis after it (its `judgesOthers` from before) is still refused. Streaks of other lengths are made by setting the
 * hash's two times on a real Redis, as a long run of beats or a pause would have left them.
 *
 * Can it fail? With the streak checked only by the worker (as before, BeatStreak), the resent
 * sweep below closed the live worker's run ("stopped beating").
 */
import assert from "node:assert/strict";
import { after, test } from "node:test";
import { Redis } from "ioredis";
import { redisKeys, type RedisKeys } from "../../lib/redis/keys";
import { closeAbandonedRuns } from "../../lib/runs/abandoned";
import { DEFAULT_RETENTION, readRun } from "../../lib/runs/records";
import type { AttemptIdentity, RunStore } from "../../lib/runs/writer";
import { serverNow } from "../../lib/redis/time";
import {
  beat,
  BEAT_STREAK,
  HEARTBEAT_EVERY_MS,
  HEARTBEAT_TTL_MS,
  newWorkerIdentity,
} from "../../lib/workers/heartbeat";
import { beginAttemptResult as beginAttempt, testAttempt } from "../support/runs";
import { startTestRedis, stopTestRedis, uniquePrefix } from "../support/redis";

const server = await startTestRedis();
const client = new Redis(server.url);
after(async () => {
  client.disconnect();
  await stopTestRedis(server);
});

/** Leaves `workerId`'s heartbeat hash as if its last beat was `lastAgoMs` ago, its streak begun `streakAgoMs` ago. */
async function setBeats(keys: RedisKeys, workerId: string, lastAgoMs: number, streakAgoMs: number): Promise<void> {
  const now = await serverNow(client);
  await client.hset(keys.workerHeartbeat(workerId), {
    id: workerId,
    heartbeatAt: now - lastAgoMs,
    beatStreakSince: now - streakAgoMs,
  });
  await client.pexpire(keys.workerHeartbeat(workerId), HEARTBEAT_TTL_MS);
}

function attempt(jobId: string, workerId: string): AttemptIdentity {
  return testAttempt(jobId, 1, { workerId });
}

test("a beat starts a streak, keeps one without gaps, and starts it again after a gap over two intervals", async () => {
  const keys = redisKeys(uniquePrefix());
  const worker = newWorkerIdentity("test");
  const first = await beat(client, keys, worker, null);
  assert.equal(first.streakSince, first.at, "the first beat starts the streak");
  assert.equal(first.judgesOthers, false);

  await setBeats(keys, worker.id, HEARTBEAT_EVERY_MS, HEARTBEAT_TTL_MS + HEARTBEAT_EVERY_MS);
  const held = await beat(client, keys, worker, null);
  assert.ok(held.at - held.streakSince >= HEARTBEAT_TTL_MS, "a streak with no gap is kept");
  assert.equal(held.judgesOthers, true);

  await setBeats(keys, worker.id, HEARTBEAT_EVERY_MS + 1_000, HEARTBEAT_TTL_MS + HEARTBEAT_EVERY_MS);
  assert.equal((await beat(client, keys, worker, null)).judgesOthers, true, "a beat a second late keeps it");

  await setBeats(keys, worker.id, 2 * HEARTBEAT_EVERY_MS, 10 * HEARTBEAT_TTL_MS);
  const refused = await beat(client, keys, worker, null);
  assert.equal(refused.streakSince, refused.at, "one refused beat (a gap of two intervals) starts it again");
  assert.equal(refused.judgesOthers, false);

  await setBeats(keys, worker.id, 4 * HEARTBEAT_EVERY_MS, 10 * HEARTBEAT_TTL_MS);
  const back = await beat(client, keys, worker, null);
  assert.equal(back.streakSince, back.at, "a beat after a longer gap (an outage, a pause) starts it again");

  await client.del(keys.workerHeartbeat(worker.id));
  const expired = await beat(client, keys, worker, null);
  assert.equal(expired.streakSince, expired.at, "a heartbeat that expired starts it again");
});

test("the close script checks the sweeper's streak when it writes: a sweep resent after an outage is refused", async () => {
  const keys = redisKeys(uniquePrefix());
  const store: RunStore & { client: Redis } = { client, keys, retention: DEFAULT_RETENTION };
  await beginAttempt(store, attempt("quiet", "quiet"), { mode: { kind: "running" } });
  // The record's worker has no heartbeat (expired in the outage, or dead: the sweeper cannot tell).
  // The sweep was sent when the sweeper judged others (`judgesOthers: true`, its beat's answer then).
  const sweep = () => closeAbandonedRuns(store, { workerId: "sweeper", activeJobIds: () => [], judgesOthers: true });

  await setBeats(keys, "sweeper", 0, 2 * HEARTBEAT_EVERY_MS);
  assert.deepEqual(await sweep(), [], "its streak is shorter than a TTL (back from an outage)");
  await setBeats(keys, "sweeper", BEAT_STREAK.freshMs + 1_000, 10 * HEARTBEAT_TTL_MS);
  assert.deepEqual(await sweep(), [], "its last beat is older than the streak allows (the sweep ran after an outage)");
  await client.del(keys.workerHeartbeat("sweeper"));
  assert.deepEqual(await sweep(), [], "it has no heartbeat itself");
  assert.equal((await readRun(client, keys, "quiet-a1"))?.status, "running");

  await setBeats(keys, "sweeper", 1_000, HEARTBEAT_TTL_MS + HEARTBEAT_EVERY_MS);
  assert.deepEqual(await sweep(), ["quiet-a1"], "a streak of a whole TTL, its last beat a second ago, judges");
  const closed = await readRun(client, keys, "quiet-a1");
  assert.equal(closed?.status, "aborted");
  assert.match(closed?.reason ?? "", /worker quiet stopped beating/);
});
