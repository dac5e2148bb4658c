/** Schedules: every process upserts them; N processes still give one job per tick. */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { createTestBed, tickingEvery2s, type TestBed, type TestWorker } from "../support/stack";
import { until } from "../support/until";
import { scheduledTickOf } from "../../lib/rebuilds/queue";
import { SCHEDULE_DIGEST_TTL_MS, schedulesDigest, syncSchedules } from "../../lib/rebuilds/schedules";
import { forgetScheduleWants } from "../../lib/rebuilds/schedule-wants";

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
  // (As a worker would at its start; its note taken back as a clean stop does.)
  const synced = await syncSchedules(bed.queue, bed.definitions, bed.main, bed.keys, "start-test");
  await forgetScheduleWants(bed.main, bed.keys, "start-test");
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

test("the minute check: a lost next tick is queued again, a scheduler no live worker's file asks for as it is follows this file again, with Redis's state lost it syncs as a start", async () => {
  const me = "minute-check-test";
  const check = () => syncSchedules(bed.queue, bed.definitions, bed.main, bed.keys, me);
  try {
    const first = await check();
    assert.deepEqual(first.failed, []);
    const again = await check();
    assert.deepEqual(again.repaired, [], "a scheduler with its tick pending is not touched");
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
    assert.deepEqual((await check()).repaired, ["sched.ticking"]);
    assert.ok(await nextPending(), "a next tick again");

    // Written by workers of another file that are gone (a rollback): this file's again.
    const scheduler = await bed.queue.getJobScheduler("sched.ticking");
    const template = scheduler!.template as never;
    await bed.queue.upsertJobScheduler("sched.ticking", { pattern: "0 0 * * * *", tz: "UTC" }, template);
    await bed.queue.upsertJobScheduler("sched.gone", { pattern: "0 0 * * * *", tz: "UTC" }, template);
    const synced = await check();
    assert.deepEqual([synced.repaired, synced.removed], [["sched.ticking"], ["sched.gone"]]);
    assert.equal((await bed.queue.getJobScheduler("sched.ticking"))?.pattern, "*/2 * * * * *");

    // Redis's state lost (the schedulers, the notes): the check syncs as a start does.
    await bed.queue.removeJobScheduler("sched.ticking");
    await bed.main.del(bed.keys.scheduleDefinitions, bed.keys.scheduleWorkers, bed.keys.scheduleWants);
    assert.deepEqual((await check()).repaired, ["sched.ticking"]);
    assert.ok(await nextPending());
    assert.equal(await bed.main.get(bed.keys.scheduleDefinitions), schedulesDigest(bed.definitions));
  } finally {
    await forgetScheduleWants(bed.main, bed.keys, me);
  }
});

test("workers of old and new definitions side by side keep each other's schedules: an added one at once, a changed one once the old workers stop, a dropped one once no worker of a file with it runs or has run for 3 min — an old worker restarted mid-deploy (black-box helper-157), a stop, a new one paused past its heartbeat, or notes Redis lost remove nothing", async () => {
  const fs = await import("node:fs");
  const path = await import("node:path");
  const { stringify } = await import("yaml");
  const { loadDefinitions } = await import("../../lib/rebuilds/definitions");
  const newFile = path.join(bed.dir, "claimwatch-new.yaml");
  fs.writeFileSync(
    newFile,
    stringify({
      rebuilds: {
        ticking: { ...tickingEvery2s(), schedule: { cron: "*/4 * * * * *", tz: "UTC" } },
        added: { ...tickingEvery2s(), output: "out/added", schedule: { cron: "*/3 * * * * *", tz: "UTC" } },
      },
    }),
  );
  const loaded = loadDefinitions(newFile);
  if (!loaded.ok) throw loaded.error;
  const NEW = loaded.definitions;
  const OLD = bed.definitions;
  const state = async () =>
    Object.fromEntries(
      (await bed.queue.getJobSchedulers(0, -1)).map((s) => [s.key ?? s.id, s.pattern ?? ""] as const).sort(),
    );
  const idOf = (worker: TestWorker) => /\[worker ([^\]]+)\]/.exec(worker.output())![1]!;
  const started: TestWorker[] = [];
  const start = async (file?: string) => {
    const worker = await bed.startWorker(file ? { CLAIMWATCH_CONFIG: file } : {});
    started.push(worker);
    return worker;
  };
  try {
    const old1 = await start();
    const new1 = await start(newFile);
    assert.deepEqual(await state(), { "sched.added": "*/3 * * * * *", "sched.ticking": "*/2 * * * * *" });
    assert.match(new1.output(), /left as their file asks: sched\.ticking/);

    // An old-file worker restarted by its supervisor mid-deploy: it used to remove sched.added.
    const old2 = await start();
    assert.match(old2.output(), /kept for them: sched\.added/);
    assert.deepEqual(await state(), { "sched.added": "*/3 * * * * *", "sched.ticking": "*/2 * * * * *" });
    await until(
      "ticks of the added schedule",
      async () => (await bed.allRuns()).filter((r) => r.rebuild === "added" && r.trigger === "schedule").length >= 2,
      30_000,
    );

    assert.equal(
      await bed.main.get(bed.keys.scheduleDefinitions),
      "mixed",
      "the dashboard goes by the queue's schedulers",
    );

    // The old workers stop: their schedules stay while their notes count (a restart of the only
    // worker of a file keeps them: review helper-163); then the next check of a new one changes the cron.
    await old1.stop();
    await old2.stop();
    const restartGap = await syncSchedules(bed.queue, NEW, bed.main, bed.keys, idOf(new1));
    assert.deepEqual([restartGap.removed, restartGap.asOthersAsk], [[], ["sched.ticking"]]);
    await noteCountedOut(old1, old2);
    const afterDeploy = await syncSchedules(bed.queue, NEW, bed.main, bed.keys, idOf(new1));
    assert.deepEqual(afterDeploy.repaired, ["sched.ticking"]);
    assert.deepEqual(await state(), { "sched.added": "*/3 * * * * *", "sched.ticking": "*/4 * * * * *" });
    assert.equal(await bed.main.get(bed.keys.scheduleDefinitions), schedulesDigest(NEW));

    // A rollback: the new worker stops and, once its note no longer counts, an old one starts —
    // the old file's schedules at its start.
    await new1.stop();
    await noteCountedOut(new1);
    const old3 = await start();
    assert.deepEqual(await state(), { "sched.ticking": "*/2 * * * * *" });

    // A new worker paused past its heartbeat's expiry (its note still counts), and then the notes
    // lost with Redis's state (its heartbeat names its file, not known): the old file removes nothing.
    const new2 = await start(newFile);
    assert.deepEqual(await state(), { "sched.added": "*/3 * * * * *", "sched.ticking": "*/2 * * * * *" });
    process.kill(new2.pid, "SIGSTOP");
    try {
      await until(
        "the paused worker's heartbeat to expire",
        async () =>
          (await bed.main.zscore(bed.keys.workerRegistry, idOf(new2))) !== null &&
          !(await listLiveIds()).includes(idOf(new2)),
        40_000,
      );
      const paused = await syncSchedules(bed.queue, OLD, bed.main, bed.keys, idOf(old3));
      assert.deepEqual([paused.removed, paused.keptForOthers], [[], ["sched.added"]]);
    } finally {
      process.kill(new2.pid, "SIGCONT");
    }
    await until("the resumed worker beats", async () => (await listLiveIds()).includes(idOf(new2)), 30_000);
    await bed.main.del(bed.keys.scheduleWorkers, bed.keys.scheduleWants);
    const lost = await syncSchedules(bed.queue, OLD, bed.main, bed.keys, idOf(old3));
    assert.deepEqual([lost.removed, lost.otherWorkers], [[], [idOf(new2)]]);
    assert.deepEqual(await state(), { "sched.added": "*/3 * * * * *", "sched.ticking": "*/2 * * * * *" });

    // Every new worker gone (after its next check noted its file again), their notes counted out: the old file's again.
    await syncSchedules(bed.queue, NEW, bed.main, bed.keys, idOf(new2));
    await new2.stop();
    const stopped = await syncSchedules(bed.queue, OLD, bed.main, bed.keys, idOf(old3));
    assert.deepEqual([stopped.removed, stopped.keptForOthers], [[], ["sched.added"]]);
    await noteCountedOut(new2);
    const alone = await syncSchedules(bed.queue, OLD, bed.main, bed.keys, idOf(old3));
    assert.deepEqual(alone.removed, ["sched.added"]);
    assert.deepEqual(await state(), { "sched.ticking": "*/2 * * * * *" });
  } finally {
    for (const worker of started) await worker.stop();
  }

  /** As SCHEDULE_NOTE_COUNTS_MS later: these stopped workers' notes no longer count. */
  async function noteCountedOut(...workers: TestWorker[]) {
    for (const worker of workers) {
      const note = await bed.main.hget(bed.keys.scheduleWorkers, idOf(worker));
      if (note) await bed.main.hset(bed.keys.scheduleWorkers, idOf(worker), note.replace(/^\d+/, "0"));
    }
  }

  async function listLiveIds() {
    const { listLiveWorkers } = await import("../../lib/workers/heartbeat");
    return (await listLiveWorkers(bed.main, bed.keys)).map((w) => w.id);
  }
});

test("a schedule removed from the definitions: kept while a worker of a file with it ran within 3 min, removed by the first check after", async () => {
  const fs = await import("node:fs");
  const { stringify } = await import("yaml");
  const { loadDefinitions } = await import("../../lib/rebuilds/definitions");
  fs.writeFileSync(
    bed.configFile,
    stringify({ rebuilds: { other: { output: "out/other", steps: [{ name: "noop", run: ["true"] }] } } }),
  );
  const loaded = loadDefinitions(bed.configFile);
  if (!loaded.ok) throw loaded.error;
  const worker = await bed.startWorker();
  try {
    assert.match(worker.output(), /schedules: 0 upserted/);
    assert.match(worker.output(), /kept for them: sched\.ticking/);
    const id = /\[worker ([^\]]+)\]/.exec(worker.output())![1]!;
    // As 3 min later: the notes of the workers of the old file (all stopped) no longer count.
    for (const [other, note] of Object.entries(await bed.main.hgetall(bed.keys.scheduleWorkers)))
      if (other !== id) await bed.main.hset(bed.keys.scheduleWorkers, other, note.replace(/^\d+/, "0"));
    const check = await syncSchedules(bed.queue, loaded.definitions, bed.main, bed.keys, id);
    assert.deepEqual(check.removed, ["sched.ticking"]);
    assert.deepEqual(await bed.queue.getJobSchedulers(0, -1), []);
  } finally {
    await worker.stop();
  }
});

test("a sync held up more than 5 s after it read which files are live removes no more schedulers: the rest wait for its next check (a worker paused there must not remove what a worker started meanwhile asks for)", async () => {
  const me = "slow-removal-test";
  const check = (queue = bed.queue) => syncSchedules(queue, bed.definitions, bed.main, bed.keys, me);
  try {
    await check();
    const template = (await bed.queue.getJobScheduler("sched.ticking"))!.template as never;
    // Two schedulers no file asks for (their workers gone for good).
    for (const id of ["sched.gone-a", "sched.gone-b"])
      await bed.queue.upsertJobScheduler(id, { pattern: "0 0 * * * *", tz: "UTC" }, template);
    // Its first removal held up 5.5 s (a pause, a slow Redis).
    let removals = 0;
    const heldUp = new Proxy(bed.queue, {
      get(target, property, receiver) {
        if (property === "removeJobScheduler")
          return async (id: string) => {
            if (++removals === 1) await new Promise((r) => setTimeout(r, 5_500));
            return target.removeJobScheduler(id);
          };
        const value: unknown = Reflect.get(target, property, receiver);
        return typeof value === "function" ? (value as (...args: unknown[]) => unknown).bind(target) : value;
      },
    });
    const slow = await check(heldUp);
    assert.equal(slow.removed.length, 1, JSON.stringify(slow));
    assert.equal(slow.removalsPostponed, true);
    const left = (await bed.queue.getJobSchedulers(0, -1))
      .map((s) => s.key ?? s.id)
      .filter((id) => id !== "sched.ticking");
    assert.equal(left.length, 1, `the other is left for the next check: ${left.join(", ")}`);
    const next = await check();
    assert.deepEqual([next.removed, next.removalsPostponed], [left, false]);
  } finally {
    await forgetScheduleWants(bed.main, bed.keys, me);
  }
});
