/** Schedules: every process upserts them; N processes still give one job per tick. */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { createTestBed, tickingEvery2s, type TestBed } from "../support/stack";
import { until } from "../support/until";
import { scheduledTickOf } from "../../lib/rebuilds/queue";
import { repairSchedules, SCHEDULE_DIGEST_TTL_MS, scheduleLead, syncSchedules } from "../../lib/rebuilds/schedules";

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

test("the minute check of a worker that leads the schedules: a lost next tick is queued again, a scheduler changed by other definitions follows this file again, with Redis's state lost it syncs as a start", async () => {
  const me = "minute-check-test";
  const first = await syncSchedules(bed.queue, bed.definitions, bed.main, bed.keys);
  assert.deepEqual(first.failed, []);
  const again = await repairSchedules(bed.queue, bed.definitions, bed.main, bed.keys, me);
  assert.deepEqual(again.repaired, [], "a scheduler with its tick pending is not touched");
  assert.equal(again.lead.leads, true, "no worker of other definitions runs");
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
  const repaired = async () => (await repairSchedules(bed.queue, bed.definitions, bed.main, bed.keys, me)).repaired;
  await loseNextTick();
  assert.deepEqual(await repaired(), ["sched.ticking"]);
  assert.ok(await nextPending(), "a next tick again");

  // Written by a worker of other definitions that has stopped since (a rollback): this file's again.
  const scheduler = await bed.queue.getJobScheduler("sched.ticking");
  await bed.queue.upsertJobScheduler(
    "sched.ticking",
    { pattern: "0 0 * * * *", tz: "UTC" },
    scheduler!.template as never,
  );
  await bed.queue.upsertJobScheduler("sched.gone", { pattern: "0 0 * * * *", tz: "UTC" }, scheduler!.template as never);
  const check = await repairSchedules(bed.queue, bed.definitions, bed.main, bed.keys, me);
  assert.deepEqual([check.repaired, check.removed], [["sched.ticking"], ["sched.gone"]]);
  assert.equal((await bed.queue.getJobScheduler("sched.ticking"))?.pattern, "*/2 * * * * *");

  // Redis's state lost (the schedulers, the digests): the check syncs as a start does.
  await bed.queue.removeJobScheduler("sched.ticking");
  await bed.main.del(bed.keys.scheduleDefinitions, bed.keys.scheduleDefinitionsSeen);
  assert.deepEqual(await repaired(), ["sched.ticking"]);
  assert.ok(await nextPending());
  assert.notEqual(await bed.main.get(bed.keys.scheduleDefinitions), null);
});

test("workers of old and new definitions side by side: the newest definitions lead the schedules; an old worker starting again mid-deploy removes nothing, and leads once the new workers stop (black-box helper-157)", async () => {
  const fs = await import("node:fs");
  const path = await import("node:path");
  const { stringify } = await import("yaml");
  const { loadDefinitions } = await import("../../lib/rebuilds/definitions");
  const newFile = path.join(bed.dir, "claimwatch-new.yaml");
  fs.writeFileSync(
    newFile,
    stringify({
      rebuilds: {
        ticking: tickingEvery2s(),
        added: { ...tickingEvery2s(), output: "out/added", schedule: { cron: "*/3 * * * * *", tz: "UTC" } },
      },
    }),
  );
  const loaded = loadDefinitions(newFile);
  if (!loaded.ok) throw loaded.error;
  const schedulerIds = async () => (await bed.queue.getJobSchedulers(0, -1)).map((s) => s.key ?? s.id).sort();

  const old = await bed.startWorker();
  const updated = await bed.startWorker({ CLAIMWATCH_CONFIG: newFile });
  try {
    assert.deepEqual(await schedulerIds(), ["sched.added", "sched.ticking"], "the new file's start adds its schedule");
    // The old worker's minute check leaves it.
    const oldCheck = await repairSchedules(bed.queue, bed.definitions, bed.main, bed.keys, "old-check");
    assert.equal(oldCheck.lead.leads, false);
    assert.deepEqual(oldCheck.removed, []);
    // An old-definitions worker restarted by its supervisor mid-deploy: it used to remove it.
    const restarted = await bed.startWorker();
    try {
      assert.match(restarted.output(), /schedules: left as they are: workers of newer definitions lead them/);
      assert.deepEqual(await schedulerIds(), ["sched.added", "sched.ticking"], "not removed by the old start");
      const ticks = await until(
        "ticks of the new schedule",
        async () => {
          const runs = (await bed.allRuns()).filter((r) => r.rebuild === "added" && r.trigger === "schedule");
          return runs.length >= 2 ? runs : null;
        },
        30_000,
      );
      assert.ok(ticks.length >= 2);
      // The new workers stop (a rollback): the old definitions lead again at the next check.
      await updated.stop();
      const rollback = await repairSchedules(bed.queue, bed.definitions, bed.main, bed.keys, "old-check");
      assert.equal(rollback.lead.leads, true);
      assert.deepEqual(rollback.removed, ["sched.added"]);
      assert.deepEqual(await schedulerIds(), ["sched.ticking"]);
      // A worker of the new file deployed again would lead at its start (the newest file run).
      assert.deepEqual(await scheduleLead(bed.main, bed.keys, loaded.definitions, "new-check"), { leads: true });
    } finally {
      await restarted.stop();
    }
  } finally {
    await updated.stop();
    await old.stop();
  }
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
