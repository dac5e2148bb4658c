/**
 * When a worker may judge others dead by their expired heartbeats (BeatStreak,
 * lib/workers/heartbeat.ts): only after its own beats have succeeded for a whole heartbeat TTL.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { BeatStreak, HEARTBEAT_EVERY_MS, HEARTBEAT_TTL_MS } from "../../lib/workers/heartbeat";

function streakAt() {
  let now = 1_000;
  const streak = new BeatStreak(() => now);
  return { streak, advance: (ms: number) => (now += ms) };
}

test("a fresh worker judges nobody until its beats have held for the TTL", () => {
  const { streak, advance } = streakAt();
  assert.equal(streak.judgesOthers(), false, "before any beat");
  streak.succeeded();
  assert.equal(streak.judgesOthers(), false, "after the first beat");
  for (let t = HEARTBEAT_EVERY_MS; t < HEARTBEAT_TTL_MS; t += HEARTBEAT_EVERY_MS) {
    advance(HEARTBEAT_EVERY_MS);
    streak.succeeded();
    assert.equal(streak.judgesOthers(), false, `${t} ms in`);
  }
  advance(HEARTBEAT_EVERY_MS);
  streak.succeeded();
  assert.equal(streak.judgesOthers(), true, "a whole TTL of beats");
});

test("a failed beat (Redis refusing writes) starts the streak again", () => {
  const { streak, advance } = streakAt();
  for (let i = 0; i <= HEARTBEAT_TTL_MS / HEARTBEAT_EVERY_MS; i++, advance(HEARTBEAT_EVERY_MS)) streak.succeeded();
  assert.equal(streak.judgesOthers(), true);
  streak.failed();
  assert.equal(streak.judgesOthers(), false, "at the failure");
  advance(HEARTBEAT_EVERY_MS);
  streak.succeeded();
  assert.equal(streak.judgesOthers(), false, "the first beat after the outage");
  for (let t = 0; t < HEARTBEAT_TTL_MS; t += HEARTBEAT_EVERY_MS) {
    advance(HEARTBEAT_EVERY_MS);
    streak.succeeded();
  }
  assert.equal(streak.judgesOthers(), true, "a TTL of beats after the outage");
});

test("a gap in its own beats longer than two intervals (the worker was paused) starts it again", () => {
  const { streak, advance } = streakAt();
  for (let i = 0; i <= HEARTBEAT_TTL_MS / HEARTBEAT_EVERY_MS; i++, advance(HEARTBEAT_EVERY_MS)) streak.succeeded();
  assert.equal(streak.judgesOthers(), true);
  advance(3 * HEARTBEAT_EVERY_MS);
  streak.succeeded();
  assert.equal(streak.judgesOthers(), false, "back from a pause: it knows nothing of the time it missed");
});
