/**
 * The Redis clock estimate (lib/redis/clock.ts) that becomes `Date.now` in processes driving
 * BullMQ: what each answer moves (only what it proves), and that as the process clock it never
 * steps back but slews, unless the gap is too wide. One sequence (the module's state is the process's).
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import {
  hostNow,
  MAX_SAMPLE_RTT_MS,
  MAX_SLEW_MS,
  redisClock,
  SLEW_RATE,
  useAsProcessClock,
} from "../../lib/redis/clock";

const near = (actual: number, expected: number, within: number, what: string) =>
  assert.ok(Math.abs(actual - expected) <= within, `${what}: ${actual} is not within ${within} ms of ${expected}`);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

test("answers move the estimate only as far as they prove; as the process clock it never steps back but slews, unless the gap is too wide", async () => {
  near(redisClock.now(), hostNow(), 5, "before any answer: the host clock");
  assert.equal(redisClock.learned(), false);

  // The first answer, to a TIME queued through a minute's outage: read when Redis came back, just
  // before it answered (not half a minute earlier).
  const server = hostNow() + 60_000;
  let at = performance.now();
  assert.equal(redisClock.learn(server, at - 60_000, at), true);
  near(redisClock.now(), server + MAX_SAMPLE_RTT_MS / 2, 50, "a queued answer");

  // A prompt answer half a second back: moved (not the process clock yet: at once).
  at = performance.now();
  assert.equal(redisClock.learn(server - 500, at - 2, at), true);
  near(redisClock.now(), server - 500, 50, "back by 500 ms, at once");
  near(redisClock.fromLocal(hostNow()), redisClock.now(), 5, "a host time on the Redis clock");

  // An answer that waited a minute (read after this process was paused) and agrees with the
  // estimate somewhere in its window: it proves nothing new, and moves nothing.
  at = performance.now();
  const sentLongAgo = at - 70_000;
  const readThen = redisClock.now() - (at - sentLongAgo) + 5;
  assert.equal(redisClock.learn(readThen, sentLongAgo, at), false);
  near(redisClock.now(), server - 500, 50, "unchanged by a stale answer");

  useAsProcessClock();
  assert.equal(Date.now, redisClock.now, "Date.now is the Redis clock");
  near(Date.now(), server - 500, 50, "Date.now");
  near(hostNow(), server - 60_000, 100, "hostNow stays the host's");

  // Forward at once.
  at = performance.now();
  redisClock.learn(server + 10_000, at - 2, at);
  near(Date.now(), server + 10_000, 50, "forward at once");

  // Five seconds back (a failover to a host behind): nothing shown is taken back; the clock runs
  // at 9/10 speed until the estimate catches up, whatever more answers say meanwhile.
  let shown = Date.now();
  const backAt = performance.now();
  const target = shown - 5_000;
  redisClock.learn(target, backAt - 2, backAt); // read at the window's start, the least move back
  assert.ok(Date.now() >= shown, "no step back");
  shown = Date.now();
  const started = performance.now();
  await sleep(300);
  at = performance.now();
  // The same clock again, read inside this answer's window: nothing new.
  assert.equal(redisClock.learn(target + (at - 1 - (backAt - 2)), at - 2, at), false, "nothing new mid-slew");
  assert.ok(Date.now() >= shown, "no step back at a second answer mid-slew");
  await sleep(300);
  const elapsed = performance.now() - started;
  near(Date.now() - shown, elapsed * (1 - SLEW_RATE), 40, "9/10 speed while slewing");

  // Answers a few ms back: never a step back either.
  for (let i = 0; i < 20; i++) {
    const before = Date.now();
    at = performance.now();
    redisClock.learn(before - 3, at - 1, at);
    assert.ok(Date.now() >= before, `no step back for a few ms (${i})`);
  }

  // Over MAX_SLEW_MS back: stepped at once (slewing it would leave this process that far ahead of others for long).
  at = performance.now();
  const farBack = Date.now() - 2 * MAX_SLEW_MS;
  redisClock.learn(farBack, at - 2, at);
  near(Date.now(), farBack, 50, "stepped back");
});
