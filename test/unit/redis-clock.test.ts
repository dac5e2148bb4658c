/**
 * The Redis clock estimate (lib/redis/clock.ts) that becomes `Date.now` in processes driving
 * BullMQ: what each answer moves, which answers are not used, and that a step back is slewed once
 * it is the process clock. One sequence (the module's state is the process's).
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { hostNow, MAX_SAMPLE_RTT_MS, redisClock, useAsProcessClock } from "../../lib/redis/clock";

const near = (actual: number, expected: number, within: number, what: string) =>
  assert.ok(Math.abs(actual - expected) <= within, `${what}: ${actual} is not within ${within} ms of ${expected}`);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

test("answers move the estimate: a queued first one read near its answer, slow ones unused; as the process clock forward at once, back only by slewing (an hour back at once)", async () => {
  near(redisClock.now(), hostNow(), 5, "before any answer: the host clock");
  assert.equal(redisClock.learned(), false);

  // The first answer, to a TIME queued through a minute's outage: read when Redis came back, just
  // before it answered (not half a minute earlier).
  const server = hostNow() + 60_000;
  let at = performance.now();
  assert.equal(redisClock.learn(server, at - 60_000, at), true);
  near(redisClock.now(), server + MAX_SAMPLE_RTT_MS / 2, 50, "a queued answer");

  // Prompt answers; the estimate follows each (back by up to a second at once).
  at = performance.now();
  assert.equal(redisClock.learn(server - 500, at - 2, at), true);
  near(redisClock.now(), server - 500, 50, "back by 500 ms, at once");
  near(redisClock.fromLocal(hostNow()), redisClock.now(), 5, "a host time on the Redis clock");

  // Once learned, a slow answer (queued through a Redis restart) is not used.
  at = performance.now();
  assert.equal(redisClock.learn(server + 30_000, at - 10_000, at), false);
  near(redisClock.now(), server - 500, 50, "unchanged by a slow answer");

  useAsProcessClock();
  assert.equal(Date.now, redisClock.now, "Date.now is the Redis clock");
  near(Date.now(), server - 500, 50, "Date.now");
  near(hostNow(), server - 60_000, 100, "hostNow stays the host's");

  // Forward at once.
  at = performance.now();
  redisClock.learn(server + 10_000, at - 2, at);
  near(Date.now(), server + 10_000, 50, "forward at once");

  // Five seconds back (a failover to a host behind): nothing shown is taken back; the clock runs
  // at half speed until the estimate catches up, whatever more answers say meanwhile.
  let shown = Date.now();
  at = performance.now();
  const target = server + 10_000 - 5_000;
  redisClock.learn(target, at - 2, at);
  assert.ok(Date.now() >= shown, "no step back");
  shown = Date.now();
  const started = performance.now();
  await sleep(300);
  at = performance.now();
  redisClock.learn(target + (at - started), at - 2, at); // the same clock again, mid-slew
  assert.ok(Date.now() >= shown, "no step back at a second answer mid-slew");
  await sleep(300);
  const elapsed = performance.now() - started;
  near(Date.now() - shown, elapsed / 2, 40, "half speed while slewing");

  // Round-trip noise a few ms back: never a step back either.
  for (let i = 0; i < 20; i++) {
    const before = Date.now();
    at = performance.now();
    redisClock.learn(before - 3, at - 1, at);
    assert.ok(Date.now() >= before, `no step back for noise (${i})`);
  }

  // An hour back: stepped at once (slewing it would leave this process an hour ahead of others for two).
  at = performance.now();
  const hourBack = Date.now() - 3_600_000;
  redisClock.learn(hourBack, at - 2, at);
  near(Date.now(), hourBack, 50, "stepped back an hour");
});
