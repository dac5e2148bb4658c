/** The banner's operational checks: a claim stale for over 5 minutes, and a missed scheduled tick. */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { CronExpressionParser } from "cron-parser";
import { acquireClaim, claimName } from "../../lib/claims";
import {
  missedTickProblems,
  staleClaimProblems,
  liveWorkerProblems,
  MISSED_TICK_GRACE_MS,
} from "../../lib/health/operations";
import { parseDefinitions } from "../../lib/rebuilds/definitions";
import { createRedis, closeRedis } from "../../lib/redis/client";
import { redisKeys } from "../../lib/redis/keys";
import { startTestRedis, uniquePrefix, type TestRedis } from "../support/redis";
import { formatAbsolute } from "../../lib/ui/format";
import { beat, listLiveWorkers, newWorkerIdentity } from "../../lib/workers/heartbeat";

let server: TestRedis;
let main: ReturnType<typeof createRedis>;
let claims: ReturnType<typeof createRedis>;
before(async () => {
  server = await startTestRedis();
  main = createRedis(server.url, "worker");
  claims = createRedis(`${server.url}/1`, "worker");
});
after(async () => {
  await closeRedis(main);
  await closeRedis(claims);
});

test("a claim whose last refresh is more than 2 intervals + 5 minutes old is reported; a fresh one is not", async () => {
  const keys = redisKeys(uniquePrefix());
  const timing = { ttlMs: 3_600_000, refreshEveryMs: 10_000 };
  const stuck = claimName("/srv/out/stuck");
  const fresh = claimName("/srv/out/fresh");
  await acquireClaim(claims, keys, stuck, { rebuild: "stuck", workerId: "w1" }, timing);
  await acquireClaim(claims, keys, fresh, { rebuild: "fresh", workerId: "w1" }, timing);
  assert.deepEqual(await staleClaimProblems(main, claims, keys), [], "just acquired: nothing stale");

  // The holder stopped refreshing 6 minutes ago (one line fakes the passage of time).
  await claims.hset(keys.claimMeta(stuck), "refreshedAt", String(Date.now() - 6 * 60_000));
  const problems = await staleClaimProblems(main, claims, keys);
  assert.equal(problems.length, 1, problems.join("\n"));
  assert.match(problems[0]!, /^Claim stuck has been stale for [45] min \(no refresh for 360 s/);
});

test("a scheduled tick without a run is reported as missed, once the scheduler existed before it", async () => {
  const keys = redisKeys(uniquePrefix());
  const parsed = parseDefinitions(
    {
      rebuilds: {
        nightly: { output: "out/n", schedule: { cron: "0 2 * * *", tz: "UTC" }, steps: [{ name: "s", run: ["true"] }] },
      },
    },
    "/srv/claimwatch.yaml",
  );
  assert.ok(parsed.ok);
  const now = Date.now();
  const tick = CronExpressionParser.parse("0 2 * * *", { tz: "UTC", currentDate: new Date(now - MISSED_TICK_GRACE_MS) })
    .prev()
    .getTime();

  assert.deepEqual(
    await missedTickProblems(main, keys, parsed.definitions, { now }),
    [],
    "no scheduler recorded: nothing to miss",
  );
  await main.set(keys.schedulerSince("sched.nightly"), String(tick + 1));
  assert.deepEqual(
    await missedTickProblems(main, keys, parsed.definitions, { now }),
    [],
    "the scheduler is newer than the tick",
  );

  await main.set(keys.schedulerSince("sched.nightly"), String(tick - 86_400_000));
  const missed = await missedTickProblems(main, keys, parsed.definitions, { now });
  assert.deepEqual(missed, [`Scheduled run of nightly at ${formatAbsolute(tick, "utc")} did not start (missed tick)`]);
  // A damaged pause entry pauses nothing (the scheduler and the worker run its ticks): still missed.
  await main.hset(keys.pausedSchedules, "sched.nightly", "{not json");
  assert.deepEqual(await missedTickProblems(main, keys, parsed.definitions, { now }), missed);
  await main.hset(
    keys.pausedSchedules,
    "sched.nightly",
    JSON.stringify({ actor: "ops (operator)", reason: "disk", at: 1 }),
  );
  assert.deepEqual(await missedTickProblems(main, keys, parsed.definitions, { now }), [], "paused: nothing is missed");
  await main.hdel(keys.pausedSchedules, "sched.nightly");

  // A run that started before the tick answers nothing; one that started at or after it (a worker
  // back from an outage ran the earlier tick it found waiting) answers it, as the alert counts
  // (black-box helper-175: the banner named each answered tick in turn).
  await main.zadd(keys.runIndex({ rebuild: "nightly" }), tick - 1, "run-before-a1");
  assert.deepEqual(await missedTickProblems(main, keys, parsed.definitions, { now }), missed, "a run before the tick");
  await main.zadd(keys.runIndex({ rebuild: "nightly" }), tick + 60_000, "run-catch-up-a1");
  assert.deepEqual(
    await missedTickProblems(main, keys, parsed.definitions, { now }),
    [],
    "a run that started after it",
  );
  await main.zrem(keys.runIndex({ rebuild: "nightly" }), "run-catch-up-a1");

  await main.zadd(keys.scheduleTicks("nightly", undefined), tick, "repeat_sched.nightly_1-a1");
  assert.deepEqual(await missedTickProblems(main, keys, parsed.definitions, { now }), [], "the tick ran");
});

test("across daylight-saving changes the banner checks the tick the scheduler made (0 2 * * * in Europe/Berlin)", async () => {
  const keys = redisKeys(uniquePrefix());
  const parsed = parseDefinitions(
    {
      rebuilds: {
        nightly: {
          output: "out/n",
          schedule: { cron: "0 2 * * *", tz: "Europe/Berlin" },
          steps: [{ name: "s", run: ["true"] }],
        },
      },
    },
    "/srv/claimwatch.yaml",
  );
  assert.ok(parsed.ok);
  const ticks = keys.scheduleTicks("nightly", undefined);
  await main.set(keys.schedulerSince("sched.nightly"), String(Date.parse("2027-03-01T00:00:00Z")));
  // Spring forward: the scheduler ran 27 March at 02:00 CET; the 28th's tick, at 03:00 CEST
  // (02:00 does not exist), did not run. At noon the banner names that one.
  await main.zadd(ticks, Date.parse("2027-03-27T01:00:00Z"), "repeat_sched.nightly_a-a1");
  const spring = await missedTickProblems(main, keys, parsed.definitions, { now: Date.parse("2027-03-28T12:00:00Z") });
  assert.equal(spring.length, 1, "the 03:00 CEST tick did not run");
  assert.match(spring[0]!, /did not start \(missed tick\)/);
  await main.zadd(ticks, Date.parse("2027-03-28T01:00:00Z"), "repeat_sched.nightly_b-a1");
  assert.deepEqual(
    await missedTickProblems(main, keys, parsed.definitions, { now: Date.parse("2027-03-28T12:00:00Z") }),
    [],
  );
  // Fall back: 02:00 occurs twice; the scheduler ran the first (00:00 UTC). Nothing is missed.
  await main.zadd(ticks, Date.parse("2027-10-31T00:00:00Z"), "repeat_sched.nightly_c-a1");
  assert.deepEqual(
    await missedTickProblems(main, keys, parsed.definitions, { now: Date.parse("2027-10-31T12:00:00Z") }),
    [],
  );
});

test("a worker whose limited steps would run in a process group (cgroup mode, no PID namespace) is reported, as is a process-group worker; a fully contained one is not", async () => {
  const keys = redisKeys(uniquePrefix());
  const strong = newWorkerIdentity("test", { containment: "cgroup", limitedStepsContainment: "pid-namespace" });
  const weakLimited = newWorkerIdentity("test", { containment: "cgroup", limitedStepsContainment: "process-group" });
  const weak = newWorkerIdentity("test", { containment: "process-group" });
  for (const worker of [strong, weakLimited, weak]) await beat(main, keys, worker, null);
  const listed = await listLiveWorkers(main, keys);
  assert.equal(listed.find((w) => w.id === weakLimited.id)?.limitedStepsContainment, "process-group");
  assert.equal(listed.find((w) => w.id === strong.id)?.limitedStepsContainment, "pid-namespace");
  const problems = await liveWorkerProblems(main, keys);
  assert.equal(problems.length, 2, problems.join("\n"));
  assert.ok(problems.some((p) => p.includes(weak.id) && p.includes("only by process group")));
  assert.ok(problems.some((p) => p.includes(weakLimited.id) && p.includes("memory/pids limits only by process group")));
  assert.ok(!problems.join("\n").includes(strong.id));
});

test("workers of an earlier claimwatch (no declared rebuilds in their heartbeat) beside workers of this one are reported; only one version live is not (review helper-183)", async () => {
  const keys = redisKeys(uniquePrefix());
  const earlier = newWorkerIdentity("test", { containment: "cgroup" });
  const current = newWorkerIdentity("test", { containment: "cgroup", declares: ["tiles"] });
  await beat(main, keys, current, null);
  assert.deepEqual(await liveWorkerProblems(main, keys), [], "this version alone");
  await beat(main, keys, earlier, null);
  const problems = await liveWorkerProblems(main, keys);
  assert.equal(problems.length, 1, problems.join("\n"));
  assert.ok(problems[0]!.includes(earlier.id) && !problems[0]!.includes(current.id), problems[0]);
  assert.match(
    problems[0]!,
    /an earlier claimwatch beside workers of this one: stop it .*RELIABILITY\.md, "Upgrading"/,
  );
});

test("a root worker whose steps could write into published builds is reported; one whose steps see them read-only, or a non-root one, is not", async () => {
  const keys = redisKeys(uniquePrefix());
  const exposed = newWorkerIdentity("test", { containment: "cgroup", publishedBuilds: "writable" });
  const shielded = newWorkerIdentity("test", { containment: "cgroup", publishedBuilds: "read-only" });
  const nonRoot = newWorkerIdentity("test", { containment: "pid-namespace" });
  for (const worker of [exposed, shielded, nonRoot]) await beat(main, keys, worker, null);
  const listed = await listLiveWorkers(main, keys);
  assert.equal(listed.find((w) => w.id === exposed.id)?.publishedBuilds, "writable");
  assert.equal(listed.find((w) => w.id === shielded.id)?.publishedBuilds, "read-only");
  assert.equal(listed.find((w) => w.id === nonRoot.id)?.publishedBuilds, undefined);
  const problems = await liveWorkerProblems(main, keys);
  assert.equal(problems.length, 1, problems.join("\n"));
  assert.ok(problems[0]!.includes(exposed.id) && problems[0]!.includes("could change a published build"), problems[0]);
});

test("a worker whose upkeep after a beat has run 30 s or more is reported with how long; one whose upkeep is not held up is not", async () => {
  const keys = redisKeys(uniquePrefix());
  const held = newWorkerIdentity("test", { containment: "cgroup" });
  const fine = newWorkerIdentity("test", { containment: "cgroup" });
  await beat(main, keys, held, null, { upkeepRunningMs: 95_000 });
  await beat(main, keys, fine, null);
  const listed = await listLiveWorkers(main, keys);
  assert.equal(listed.find((w) => w.id === held.id)?.upkeepRunningMs, 95_000);
  assert.equal(listed.find((w) => w.id === fine.id)?.upkeepRunningMs, null);
  assert.deepEqual(await liveWorkerProblems(main, keys), [
    `Worker ${held.id}: its upkeep after a heartbeat has run for 1 min 35 s (a hung disk or an unanswered Redis command?): until it ends, this worker closes no dead worker's runs, repairs no current link, trims no records and prunes no builds`,
  ]);
  await beat(main, keys, held, null); // it ended
  assert.deepEqual(await liveWorkerProblems(main, keys), []);
});
