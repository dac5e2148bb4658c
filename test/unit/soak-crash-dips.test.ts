/**
 * The soak checker's rule for a pointer that reads lower after a Redis crash: Redis data loss
 * that claimwatch repaired (reported apart) only when the crash could have lost the higher read.
 * The events are those of a CI run (RDB-only claims Redis) whose checker called the repaired
 * loss a rollback: the watcher read fence 8 after the crash was begun, a moment before the
 * server died.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { abortedPublishExcused, isRepairedCrashDip, redisLossWindows } from "../../scripts/soak/checker";
import type { SoakEvent } from "../../scripts/soak/bed";

const pointer = (t: number, fence: number): SoakEvent => ({ t, kind: "pointer", claim: "tiles", fence });
const crash = (t: number): SoakEvent[] => [
  { t, kind: "redis-crash", pid: 1, role: "claims" },
  { t: t + 86, kind: "redis-down", pid: 1, role: "claims" },
  { t: t + 2_886, kind: "redis-up", pid: 2, role: "claims" },
];
const byTime = (events: SoakEvent[]) => [...events].sort((a, b) => a.t - b.t);

describe("soak checker: pointer dips after a Redis crash", () => {
  test("read at the higher fence after the crash began, before the server was down: repaired", () => {
    const events = byTime([
      pointer(7_873, 4),
      ...crash(20_719),
      pointer(20_804, 8),
      pointer(23_849, 4),
      pointer(25_484, 8),
    ]);
    assert.deepEqual(redisLossWindows(events), [{ from: 20_719, to: 20_805 }]);
    assert.equal(isRepairedCrashDip(events, { claim: "tiles", fromT: 20_804, toT: 23_849, top: 8 }), true);
  });

  test("never put back: a rollback", () => {
    const events = byTime([...crash(20_719), pointer(20_804, 8), pointer(23_849, 4)]);
    assert.equal(isRepairedCrashDip(events, { claim: "tiles", fromT: 20_804, toT: 23_849, top: 8 }), false);
  });

  test("the higher fence read after the server was down and back: a crash cannot explain it", () => {
    const events = byTime([...crash(20_719), pointer(24_000, 8), pointer(25_000, 4), pointer(26_000, 8)]);
    assert.equal(isRepairedCrashDip(events, { claim: "tiles", fromT: 24_000, toT: 25_000, top: 8 }), false);
  });

  test("no crash at all: a rollback", () => {
    const events = [pointer(1_000, 8), pointer(2_000, 4), pointer(3_000, 8)];
    assert.equal(isRepairedCrashDip(events, { claim: "tiles", fromT: 1_000, toT: 2_000, top: 8 }), false);
  });

  test("a failover's window runs from the ask (or the primary's kill) until the new primary serves", () => {
    const events: SoakEvent[] = [
      { t: 1_000, kind: "redis-failover-asked", from: 1 },
      { t: 2_300, kind: "redis-failover", from: 1, to: 2, crash: false },
      { t: 5_000, kind: "redis-crash", pid: 3, role: "main", failover: true },
      { t: 5_100, kind: "redis-down", pid: 3, role: "main" },
      { t: 6_900, kind: "redis-failover", from: 2, to: 3, crash: true },
    ];
    assert.deepEqual(redisLossWindows(events), [
      { from: 1_000, to: 2_300 },
      { from: 5_000, to: 6_900 },
    ]);
  });
});

describe("soak checker: a killed holder's publish closed aborted", () => {
  const published = (t: number, runId: string | null, fence: number): SoakEvent => ({
    t,
    kind: "pointer",
    claim: "tiles",
    fence,
    value: "ab".repeat(16),
    runId,
  });
  const run = { claim: "tiles", runId: "job-7-a1", closedAt: 30_000 };

  test("the pointer still named the run when it was closed, no Redis fault: the closer should have said rebuilt", () => {
    assert.equal(abortedPublishExcused([published(10_000, "job-7-a1", 5)], run), false);
  });

  test("another run published before the close: excused", () => {
    const events = [published(10_000, "job-7-a1", 5), published(25_000, "job-8-a1", 6)];
    assert.equal(abortedPublishExcused(events, run), true);
  });

  test("another run published only well after the close: not excused", () => {
    const events = [published(10_000, "job-7-a1", 5), published(40_000, "job-8-a1", 6)];
    assert.equal(abortedPublishExcused(events, run), false);
  });

  test("a Redis fault around the publish or the close: excused", () => {
    for (const t of [9_000, 20_000, 30_500]) {
      const events = byTime([published(10_000, "job-7-a1", 5), { t, kind: "redis-freeze", pid: 1 }]);
      assert.equal(abortedPublishExcused(events, run), true, `a freeze at ${t}`);
    }
    const late = byTime([published(10_000, "job-7-a1", 5), { t: 35_000, kind: "redis-freeze", pid: 1 }]);
    assert.equal(abortedPublishExcused(late, run), false, "a freeze after the close explains nothing");
  });
});
