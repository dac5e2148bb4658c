/**
 * `scheduleMissed` and the banner agree (black-box helper-120): a paused schedule misses no tick,
 * not even ticks recorded before its pause (the alert kept firing while the banner was quiet), nor
 * does a tick before the schedule was set up or last resumed; and the banner's missed tick waits
 * for the rule's `grace`, as the alert does (it used a fixed 2 min).
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import type { Redis } from "ioredis";
import { readAlertSnapshot, recordExpectedTicks } from "../../lib/alerts/snapshot";
import { missedTickGraceOf, missedTickProblems } from "../../lib/health/operations";
import { parseDefinitions } from "../../lib/rebuilds/definitions";
import { schedulerIdOf } from "../../lib/rebuilds/queue";
import { closeRedis, createRedis } from "../../lib/redis/client";
import { redisKeys } from "../../lib/redis/keys";
import { serverNow } from "../../lib/redis/time";
import { startTestRedis, stopTestRedis, uniquePrefix, type TestRedis } from "../support/redis";

let server: TestRedis;
let main: Redis;
before(async () => {
  server = await startTestRedis();
  main = createRedis(`redis://127.0.0.1:${server.port}`, "worker");
});
after(async () => {
  await closeRedis(main);
  await stopTestRedis(server);
});

const parsed = parseDefinitions(
  {
    rebuilds: {
      quick: { output: "out/q", schedule: { cron: "*/2 * * * * *", tz: "UTC" }, steps: [{ name: "s", run: ["true"] }] },
    },
    alerts: { rules: { scheduleMissed: { grace: "20s" } } },
  },
  "/srv/claimwatch.yaml",
);

test("a paused schedule's ticks recorded before the pause are not missed; nor are ticks before its resume", async () => {
  assert.ok(parsed.ok);
  const { definitions } = parsed;
  const keys = redisKeys(uniquePrefix("missed"));
  const now = await serverNow(main);
  await main.set(keys.schedulerSince(schedulerIdOf("quick", undefined)), String(now - 120_000));
  await recordExpectedTicks(main, keys, definitions, now);
  const unserved = async () =>
    (await readAlertSnapshot(main, main, keys, definitions, { takeoverWindowMs: 0, graceMs: 20_000 })).series.find(
      (s) => s.rebuild === "quick",
    )!.unservedTicks;
  assert.ok((await unserved()).length > 0, "no worker ran: ticks are missed");
  // A damaged pause entry pauses nothing (the scheduler and the worker run its ticks): still missed.
  await main.hset(keys.pausedSchedules, schedulerIdOf("quick", undefined), "{not json");
  assert.ok((await unserved()).length > 0, "a damaged pause entry hid the missed ticks");
  // Paused: nothing missed, also what was recorded before.
  await main.hset(
    keys.pausedSchedules,
    schedulerIdOf("quick", undefined),
    JSON.stringify({ actor: "op", reason: "x", at: now }),
  );
  assert.deepEqual(await unserved(), []);
  // Resumed now (the resume moves schedulerSince): the ticks before it stay unmissed.
  await main.hdel(keys.pausedSchedules, schedulerIdOf("quick", undefined));
  await main.set(keys.schedulerSince(schedulerIdOf("quick", undefined)), String(now));
  assert.deepEqual(await unserved(), []);
});

test("the banner's missed tick waits for the rule's grace", async () => {
  assert.ok(parsed.ok);
  const { definitions } = parsed;
  assert.equal(missedTickGraceOf(definitions), 20_000);
  const keys = redisKeys(uniquePrefix("missed"));
  const now = Date.now();
  await main.set(keys.schedulerSince(schedulerIdOf("quick", undefined)), String(now - 120_000));
  // The tick due 20 s ago, after the schedule was set up (2 min ago), has no run: missed.
  const [line] = await missedTickProblems(main, keys, definitions, now);
  assert.match(line ?? "", /^Scheduled run of quick at .* did not start \(missed tick\)$/);
  // With the rule's default grace (10 min) the tick looked at is before the schedule existed: none missed yet.
  assert.deepEqual(await missedTickProblems(main, keys, { ...definitions, alerts: undefined }, now), []);
});
