/** Schedules: every process upserts them; N processes still give one job per tick. */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { createTestBed, tickingEvery2s, type TestBed } from "../support/stack";
import { until } from "../support/until";
import { scheduledTickOf } from "../../lib/rebuilds/queue";
import { repairSchedules, SCHEDULE_DIGEST_TTL_MS, syncSchedules } from "../../lib/rebuilds/schedules";

let bed: TestBed;
before(async () => {
  bed = await createTestBed({
    ticking: tickingEvery2s(),
  });
});
after(() => bed.close());

test("two processes upserting the same schedule: one scheduler, one job per tick", async () => {
  const a = await bed.startWorker();
  const b = await bed.startWorker();
  try {
    const schedulers = await bed.queue.getJobSchedulers(0, -1);
    assert.deepEqual(
      schedulers.map((s) => s.key ?? s.id),
      ["sched.ticking"],
    );
    await new Promise((r) => setTimeout(r, 9_000));
    const ticks = await bed.main.zrange(bed.keys.scheduleTicks("ticking", undefined), "0", "-1", "WITHSCORES");
    const tickTimes: number[] = [];
    for (let i = 1; i < ticks.length; i += 2) tickTimes.push(Number(ticks[i]));
    const scheduled = (await bed.allRuns()).filter((r) => r.trigger === "schedule");
    assert.ok(scheduled.length >= 3, `expected several ticks in 9 s, got ${scheduled.length}`);
    assert.equal(new Set(tickTimes).size, tickTimes.length, "no tick ran twice");
    // One job per tick (a stalled attempt's redelivery is the same job, recorded as its next attempt).
    const tickOfJob = [...new Set(scheduled.map((r) => r.jobId))].map((id) => scheduledTickOf(id)?.tickAt);
    assert.equal(new Set(tickOfJob).size, tickOfJob.length, "one job per tick");
    for (const t of tickTimes) assert.equal(t % 2_000, 0, "ticks land on the cron pattern");
  } finally {
    await a.stop();
    await b.stop();
  }
});

test("a tick that fell due while no worker ran is not replaced by the next worker's start: it runs", async () => {
  // A worker upserts the scheduler, then stops; its next tick falls due with nobody to take it.
  const first = await bed.startWorker();
  await first.stop();
  const scheduler = await bed.queue.getJobScheduler("sched.ticking");
  const due = Number(scheduler?.next);
  assert.ok(due > 0, "the scheduler has a next tick");
  const tickJob = `repeat:sched.ticking:${due}`;
  while (Date.now() < due + 2_500) await new Promise((r) => setTimeout(r, 250));
  assert.equal(await bed.queue.getJobState(tickJob), "delayed", "due, not taken");
  // What every process does at its start, before its workers take jobs: it must leave that tick
  // in place (an upsert would replace it with the next one from now).
  const synced = await syncSchedules(bed.queue, bed.definitions, bed.main, bed.keys);
  assert.deepEqual(synced.upserted, ["sched.ticking"]);
  assert.equal(await bed.queue.getJobState(tickJob), "delayed", "the due tick is still there");
  const second = await bed.startWorker();
  try {
    const ran = await until(
      `a run of the due tick ${tickJob}`,
      async () => (await bed.allRuns()).find((r) => r.jobId === tickJob),
      30_000,
    );
    assert.equal(ran.trigger, "schedule");
  } finally {
    await second.stop();
  }
});

test("the minute check: a lost next tick is queued again; a scheduler other definitions wrote, or removed, is left alone; with Redis's state lost it syncs as a start", async () => {
  const first = await syncSchedules(bed.queue, bed.definitions, bed.main, bed.keys);
  assert.deepEqual(first.failed, []);
  const again = await repairSchedules(bed.queue, bed.definitions, bed.main, bed.keys);
  assert.deepEqual(again, { repaired: [], failed: [] }, "a scheduler with its tick pending is not touched");
  const ttl = await bed.main.pttl(bed.keys.scheduleDefinitions);
  assert.ok(ttl > 0 && ttl <= SCHEDULE_DIGEST_TTL_MS, `the digest lives while its workers run (${ttl} ms)`);
  // As a crash that lost the write would leave it: no job, the scheduler still naming it.
  const loseNextTick = async () => {
    const next = (await bed.queue.getJobScheduler("sched.ticking"))?.next;
    const id = `repeat:sched.ticking:${next}`;
    await bed.main.zrem(bed.queue.toKey("delayed"), id);
    await bed.main.del(bed.queue.toKey(id));
    assert.equal(await bed.queue.getJobState(id), "unknown");
  };
  const nextPending = async () => {
    const next = (await bed.queue.getJobScheduler("sched.ticking"))?.next;
    return next !== undefined && (await bed.queue.getJobState(`repeat:sched.ticking:${next}`)) === "delayed";
  };
  await loseNextTick();
  assert.deepEqual((await repairSchedules(bed.queue, bed.definitions, bed.main, bed.keys)).repaired, ["sched.ticking"]);
  assert.ok(await nextPending(), "a next tick again");

  // A worker of other definitions started last (a rolling deploy): a lost tick of a scheduler both
  // agree on is still queued again, but a scheduler it removed is not brought back.
  await bed.main.set(bed.keys.scheduleDefinitions, "another-version");
  await loseNextTick();
  assert.deepEqual((await repairSchedules(bed.queue, bed.definitions, bed.main, bed.keys)).repaired, ["sched.ticking"]);
  await bed.queue.removeJobScheduler("sched.ticking");
  assert.deepEqual((await repairSchedules(bed.queue, bed.definitions, bed.main, bed.keys)).repaired, []);
  assert.equal(await bed.queue.getJobScheduler("sched.ticking"), undefined, "not brought back");

  // The digest gone with the rest of Redis's state: the check syncs as a start does.
  await bed.main.del(bed.keys.scheduleDefinitions);
  assert.deepEqual((await repairSchedules(bed.queue, bed.definitions, bed.main, bed.keys)).repaired, ["sched.ticking"]);
  assert.ok(await nextPending());
  assert.notEqual(await bed.main.get(bed.keys.scheduleDefinitions), null);
});

test("a schedule removed from the definitions is removed at the next start", async () => {
  const fs = await import("node:fs");
  const { stringify } = await import("yaml");
  fs.writeFileSync(
    bed.configFile,
    stringify({ rebuilds: { other: { output: "out/other", steps: [{ name: "noop", run: ["true"] }] } } }),
  );
  const worker = await bed.startWorker();
  try {
    assert.match(worker.output(), /schedules: 0 upserted, removed sched\.ticking/);
    assert.deepEqual(await bed.queue.getJobSchedulers(0, -1), []);
  } finally {
    await worker.stop();
  }
});
