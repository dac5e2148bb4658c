/** The rule workers of different definitions side by side sync the schedules by (lib/rebuilds/schedule-wants.ts). */
import assert from "node:assert/strict";
import { test } from "node:test";
import { planSchedules, scheduleSpecKey, type LiveScheduleFiles } from "../../lib/rebuilds/schedule-wants";

const OLD = {
  digest: "old",
  wants: new Map([
    ["sched.a", "a1"],
    ["sched.changed", "c1"],
    ["sched.dropped", "d1"],
  ]),
};
const NEW = {
  digest: "new",
  wants: new Map([
    ["sched.a", "a1"],
    ["sched.changed", "c2"],
    ["sched.added", "n1"],
  ]),
};
const liveOf = (...files: (typeof OLD)[]): LiveScheduleFiles => ({
  files: new Map(files.map((f) => [f.digest, { wants: f.wants, workers: [`${f.digest}-worker`] }])),
  unknown: [],
});

test("alone: the schedules follow this file (added, changed, removed)", () => {
  const existing = new Map([
    ["sched.a", "a1"],
    ["sched.changed", "c1"],
    ["sched.dropped", "d1"],
    ["sched.stray", "x"],
  ]);
  assert.deepEqual(planSchedules(NEW, liveOf(NEW), existing), {
    ours: ["sched.a", "sched.changed", "sched.added"],
    asOthersAsk: [],
    keptForOthers: [],
    remove: ["sched.dropped", "sched.stray"],
    mixed: false,
  });
});

test("old and new side by side: nothing either file has is removed, a change waits for the old workers, an addition is made at once — whichever worker checks (no flapping)", () => {
  const afterOld = new Map([
    ["sched.a", "a1"],
    ["sched.changed", "c1"],
    ["sched.dropped", "d1"],
  ]);
  const byNew = planSchedules(NEW, liveOf(OLD, NEW), afterOld);
  assert.deepEqual(byNew, {
    ours: ["sched.a", "sched.added"],
    asOthersAsk: ["sched.changed"],
    keptForOthers: ["sched.dropped"],
    remove: [],
    mixed: true,
  });
  // What the new worker leaves: the old worker (restarted mid-deploy: helper-157) changes none of it.
  const afterNew = new Map([...afterOld, ["sched.added", "n1"]]);
  assert.deepEqual(planSchedules(OLD, liveOf(OLD, NEW), afterNew), {
    ours: ["sched.a", "sched.changed", "sched.dropped"],
    asOthersAsk: [],
    keptForOthers: ["sched.added"],
    remove: [],
    mixed: true,
  });
  assert.deepEqual(planSchedules(NEW, liveOf(OLD, NEW), afterNew).remove, []);
  // Whichever file wrote a shared scheduler's spec last, the other leaves it.
  const changedByNew = new Map([...afterNew, ["sched.changed", "c2"]]);
  assert.deepEqual(planSchedules(OLD, liveOf(OLD, NEW), changedByNew).asOthersAsk, ["sched.changed"]);
  assert.deepEqual(planSchedules(NEW, liveOf(OLD, NEW), changedByNew).asOthersAsk, []);
});

test("a spec no live file asks for is this file's to set; a live worker whose file is not known keeps every scheduler", () => {
  const existing = new Map([
    ["sched.changed", "c-from-a-gone-file"],
    ["sched.stray", "x"],
  ]);
  const plan = planSchedules(NEW, liveOf(OLD, NEW), existing);
  assert.ok(plan.ours.includes("sched.changed"));
  assert.deepEqual(plan.remove, ["sched.stray"]);
  const withUnknown = { ...liveOf(NEW), unknown: ["worker-of-an-older-version"] };
  assert.deepEqual(planSchedules(NEW, withUnknown, existing).remove, []);
  assert.deepEqual(planSchedules(NEW, withUnknown, existing).keptForOthers, ["sched.stray"]);
  assert.equal(planSchedules(NEW, withUnknown, existing).mixed, true);
});

test("spec keys: the same schedule gives the same key whatever the order of its data's fields; any difference another", () => {
  const spec = {
    pattern: "*/2 * * * * *",
    tz: "UTC",
    name: "r",
    data: { rebuild: "r", force: false, trigger: "schedule" },
    opts: { attempts: 3, removeOnFail: { age: 1 }, backoff: undefined },
  };
  const reordered = {
    ...spec,
    data: { trigger: "schedule", force: false, rebuild: "r" },
    opts: { removeOnFail: { age: 1 }, attempts: 3 },
  };
  assert.equal(scheduleSpecKey(spec), scheduleSpecKey(reordered));
  for (const changed of [
    { ...spec, pattern: "*/3 * * * * *" },
    { ...spec, tz: "Europe/Paris" },
    { ...spec, data: { ...spec.data, tenant: "a" } },
    { ...spec, opts: { ...spec.opts, attempts: 4 } },
  ])
    assert.notEqual(scheduleSpecKey(changed), scheduleSpecKey(spec));
});
