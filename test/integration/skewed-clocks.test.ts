/**
 * BullMQ under host clocks that disagree (libfaketime): its delays and schedule ticks are compared
 * with the clock of whichever process looks at them, so claimwatch's processes run BullMQ on the
 * Redis clock (lib/redis/clock.ts). Before, a worker a minute ahead ran every tick a minute early
 * and, once it stopped, left a minute with no tick; a process behind that resumed a schedule
 * queued a tick in the past (or failed: its id was taken), and showed a next run already past.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";
import { scheduledTickOf } from "../../lib/rebuilds/queue";
import { serverNow } from "../../lib/redis/time";
import { skewedClockEnv } from "../../scripts/faults/clock";
import { createTestBed, tickingEvery2s, type TestBed } from "../support/stack";
import { until } from "../support/until";

const HOST = fileURLToPath(new URL("../support/schedule-host.ts", import.meta.url));

let bed: TestBed;
before(async () => {
  bed = await createTestBed({
    ticking: tickingEvery2s(),
  });
});
after(() => bed.close());

/** The schedule's runs: tick time (from the job id) and start (Redis clock). */
async function scheduledRuns() {
  return (await bed.allRuns())
    .filter((run) => run.trigger === "schedule" && run.startedAt !== null)
    .map((run) => ({
      tick: scheduledTickOf(run.jobId)!.tickAt,
      startedAt: run.startedAt!,
      id: run.id,
      jobId: run.jobId,
      attempt: run.attempt,
      status: run.status,
      reason: run.reason,
      host: run.host,
      workerId: run.workerId,
    }))
    .sort((a, b) => a.tick - b.tick);
}

test("a worker a minute ahead runs no tick early, and the schedule goes on ticking once it stops", async () => {
  const real = await bed.startWorker();
  const ahead = await bed.startWorker(skewedClockEnv("+60s"));
  let stoppedAt = 0;
  try {
    await new Promise((r) => setTimeout(r, 10_000));
    await ahead.stop();
    stoppedAt = await serverNow(bed.main);
    // Ticks keep coming after it stopped: not a minute's gap.
    await until(
      "two ticks run after the worker ahead stopped",
      async () => (await scheduledRuns()).filter((run) => run.startedAt > stoppedAt).length >= 2,
      15_000,
    );
  } finally {
    await ahead.stop();
    await real.stop();
  }
  const runs = await scheduledRuns();
  assert.ok(runs.length >= 5, `several ticks ran (${runs.length})`);
  for (const run of runs)
    assert.ok(
      // The estimate may be ahead of Redis by up to half a round trip it still uses (125 ms).
      run.startedAt >= run.tick - 150,
      `run ${run.id} of the ${run.tick} tick started ${run.tick - run.startedAt} ms early`,
    );
  // A worker that stops mid-run hands its attempt back (recorded aborted) and the job's next
  // attempt is that tick's run: a redelivery, not a second run. What must not happen is two jobs
  // for one tick, or two attempts of one that both ran to their end.
  const byTick = new Map<number, typeof runs>();
  for (const run of runs) byTick.set(run.tick, [...(byTick.get(run.tick) ?? []), run]);
  for (const [tick, ofTick] of byTick) {
    const detail = JSON.stringify(ofTick, null, 1);
    assert.equal(new Set(ofTick.map((run) => run.jobId)).size, 1, `one job for the ${tick} tick: ${detail}`);
    assert.equal(new Set(ofTick.map((run) => run.attempt)).size, ofTick.length, `one record per attempt: ${detail}`);
    const ranToAnEnd = ofTick.filter((run) => !/^worker shutdown: job handed back/.test(run.reason ?? ""));
    assert.ok(ranToAnEnd.length <= 1, `no tick ran twice: ${detail}`);
  }
});

test("a process a minute behind resumes a schedule: the next tick is ahead of the Redis clock, as is the next run it shows", async () => {
  const host = (action: "pause" | "resume") => {
    const ran = spawnSync(process.execPath, ["--import", "tsx", HOST, action, "ticking"], {
      env: { ...bed.env, ...skewedClockEnv("-60s") },
      encoding: "utf8",
      timeout: 60_000,
    });
    assert.equal(ran.status, 0, ran.stderr);
    return JSON.parse(ran.stdout.trim().split("\n").at(-1)!) as {
      outcome: { status?: string; error?: string };
      next: number | null;
      nextRunAt: string | null;
      hostNow: number;
    };
  };
  const paused = host("pause");
  assert.equal(paused.outcome.status, "done", JSON.stringify(paused.outcome));
  assert.ok((await serverNow(bed.main)) - paused.hostNow > 55_000, "the host's clock is a minute behind");

  const before = await serverNow(bed.main);
  const resumed = host("resume");
  assert.equal(resumed.outcome.status, "done", JSON.stringify(resumed.outcome));
  assert.ok(
    resumed.next !== null && resumed.next >= before,
    `the next tick (${resumed.next}) is not in the past (${before})`,
  );
  const shown = Date.parse(resumed.nextRunAt ?? "");
  assert.ok(shown >= before && shown <= before + 60_000, `the next run shown (${resumed.nextRunAt}) is ahead`);
});
