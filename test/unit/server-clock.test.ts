/** The page's one server clock (helper-168: a viewer 120 s fast saw live workers beat "2 min ago"). */
import assert from "node:assert/strict";
import { test } from "node:test";
import { ServerClock } from "../../lib/ui/server-clock";

test("a server time read when the browser said otherwise gives the offset every age is judged by", () => {
  const clock = new ServerClock();
  assert.equal(clock.serverTimeAt(1_000_000), 1_000_000); // nothing known: the browser's clock
  // The browser is 120 s fast: its 1 120 000 is the server's 1 000 000.
  clock.observe(1_000_000, 1_120_000);
  assert.equal(clock.offsetMs(), -120_000);
  assert.equal(clock.serverTimeAt(1_125_000), 1_005_000);
});

test("the render time is a first guess only: it never replaces a measured offset", () => {
  const clock = new ServerClock();
  clock.observe(1_000_000, 1_120_500, { rough: true });
  assert.equal(clock.offsetMs(), -120_500);
  clock.observe(1_001_000, 1_121_000);
  assert.equal(clock.offsetMs(), -120_000);
  clock.observe(1_002_000, 1_200_000, { rough: true });
  assert.equal(clock.offsetMs(), -120_000);
});

test("listeners hear of a changed offset; nonsense times are ignored", () => {
  const clock = new ServerClock();
  let heard = 0;
  const stop = clock.subscribe(() => (heard += 1));
  clock.observe(5_000, 4_000);
  clock.observe(6_000, 5_000); // the same offset
  clock.observe(Number.NaN, 5_000);
  clock.observe(0, 5_000);
  assert.equal(heard, 1);
  assert.equal(clock.offsetMs(), 1_000);
  stop();
  clock.observe(9_000, 5_000);
  assert.equal(heard, 1);
});
