/**
 * `scheduleMissed` and the banner agree (black-box helper-120): a paused schedule misses no tick,
 * not even ticks recorded before its pause (the alert kept firing while the banner was quiet), nor
 * does a tick before the schedule was set up or last resumed; and the banner's missed tick waits
 * for the rule's `grace`, as the alert does (it used a fixed 2 min).
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { Queue } from "bullmq";
import type { Redis } from "ioredis";
import { readAlertSnapshot, recordExpectedTicks } from "../../lib/alerts/snapshot";
import { missedTickGraceOf, missedTickProblems } from "../../lib/health/operations";
import { parseDefinitions } from "../../lib/rebuilds/definitions";
import { queuePrefix, REBUILD_QUEUE, schedulerIdOf } from "../../lib/rebuilds/queue";
import { syncSchedules, tickingSchedules } from "../../lib/rebuilds/schedules";
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
  const queue = new Queue(REBUILD_QUEUE, { connection: main, prefix: queuePrefix(keys) });
  await recordExpectedTicks(main, keys, (await tickingSchedules(queue, main, keys, definitions)).schedules, now);
  await queue.close();
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
  const [line] = await missedTickProblems(main, keys, definitions, { now });
  assert.match(line ?? "", /^Scheduled run of quick at .* did not start \(missed tick\)$/);
  // With the rule's default grace (10 min) the tick looked at is before the schedule existed: none missed yet.
  assert.deepEqual(await missedTickProblems(main, keys, { ...definitions, alerts: undefined }, { now }), []);
});

test("a schedule the workers run with another cron than this process's file (edited, the web server not restarted): its ticks are the workers', none of the file's is missed, and the definitions are told apart (helper-143)", async () => {
  const fileOf = (cron: string) =>
    parseDefinitions(
      {
        rebuilds: { quick: { output: "out/q", schedule: { cron, tz: "UTC" }, steps: [{ name: "s", run: ["true"] }] } },
        alerts: { rules: { scheduleMissed: { grace: "20s" } } },
      },
      "/srv/claimwatch.yaml",
    );
  const before = fileOf("*/2 * * * * *");
  const edited = fileOf("0 0 1 1 *"); // once a year: no tick in the last day
  assert.ok(before.ok && edited.ok);
  const keys = redisKeys(uniquePrefix("missed"));
  const queue = new Queue(REBUILD_QUEUE, { connection: main, prefix: queuePrefix(keys) });
  try {
    // The workers started with the old file, then (after the edit) again with the new one.
    await syncSchedules(queue, before.definitions, main, keys, "worker-a");
    const id = schedulerIdOf("quick", undefined);
    await main.set(keys.schedulerSince(id), String((await serverNow(main)) - 120_000));
    await syncSchedules(queue, edited.definitions, main, keys, "worker-a");
    const now = await serverNow(main);
    assert.ok(
      Number(await main.get(keys.schedulerSince(id))) > now - 60_000,
      "a changed cron moves schedulerSince: the ticks before were another schedule's",
    );
    // This process still has the old file.
    const ticking = await tickingSchedules(queue, main, keys, before.definitions);
    assert.equal(ticking.definitionsDiffer, true);
    assert.deepEqual(
      ticking.schedules.map((s) => [s.schedulerId, s.cron, s.tz]),
      [[id, "0 0 1 1 *", "UTC"]],
    );
    await recordExpectedTicks(main, keys, ticking.schedules, now);
    const snapshot = await readAlertSnapshot(main, main, keys, before.definitions, {
      takeoverWindowMs: 0,
      graceMs: 20_000,
      ticking: new Set(ticking.schedules.map((s) => s.schedulerId)),
    });
    assert.deepEqual(snapshot.series.find((s) => s.rebuild === "quick")!.unservedTicks, []);
    assert.deepEqual(
      await missedTickProblems(main, keys, before.definitions, { now, schedules: ticking.schedules }),
      [],
    );
    // What the file here says would have been missed (the old rule): the test can fail.
    await main.set(keys.schedulerSince(id), String(now - 120_000));
    assert.equal((await missedTickProblems(main, keys, before.definitions, { now })).length, 1);
    // The same file as the workers': its own schedules, nothing differs.
    const same = await tickingSchedules(queue, main, keys, edited.definitions);
    assert.equal(same.definitionsDiffer, false);
    assert.deepEqual(
      same.schedules.map((s) => s.cron),
      ["0 0 1 1 *"],
    );
  } finally {
    await queue.obliterate({ force: true }).catch(() => {});
    await queue.close();
  }
});
