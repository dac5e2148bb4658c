/**
 * The soak checker's overlap rule (scripts/soak/checker.ts findOverlaps): two step writers on one
 * claim at once are excused ("fenced") only while one of them was a paused holder and the
 * earlier one — which had lost its claim by the time the later one wrote — did not publish.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { findOverlaps, type JournalRun, type WorkerTimeline } from "../../scripts/soak/checker";

const run = (
  runId: string,
  workerPid: number,
  start: number,
  stop: number,
  fence: number | null = null,
): JournalRun => ({
  runId,
  fence,
  rebuild: "tiles",
  tenant: null,
  version: "v1",
  pid: workerPid * 10,
  workerPid,
  start,
  stop,
  stopKind: "done",
  writes: 3,
  orphanWrites: 0,
  writeTimes: [],
  lines: [],
});
const worker = (pid: number, pauses: { from: number; to: number }[] = []): WorkerTimeline => ({
  pid,
  workerId: `w${pid}`,
  goneAt: null,
  goneHow: null,
  pauses: pauses.map((p) => ({ ...p, ms: p.to - p.from })),
});

// `old` (worker 1, paused 1 000–6 000) wrote 0–7 000; `new` (worker 2) took the claim at 4 000.
const journal = new Map([
  ["old", run("old", 1, 0, 7_000)],
  ["new", run("new", 2, 4_000, 9_000)],
]);
const workers = new Map([
  [1, worker(1, [{ from: 1_000, to: 6_000 }])],
  [2, worker(2)],
]);

describe("soak checker: overlapping writers", () => {
  test("a paused holder's step beside the newer holder, the newer one published: fenced", () => {
    const [overlap, ...more] = findOverlaps(journal, workers, new Set(["new"]));
    assert.equal(more.length, 0);
    assert.equal(overlap?.kind, "fenced");
  });

  test("the paused (earlier) writer published: counted, though the newer one did not", () => {
    const [overlap] = findOverlaps(journal, workers, new Set(["old"]));
    assert.equal(overlap?.kind, "live");
    assert.equal(overlap?.stalePublished, true);
    assert.equal(overlap?.bothPublished, false);
  });

  test("both published: counted", () => {
    const [overlap] = findOverlaps(journal, workers, new Set(["old", "new"]));
    assert.equal(overlap?.kind, "live");
    assert.equal(overlap?.bothPublished, true);
  });

  test("the stale writer is the lower fence, not the first to write (review helper-132)", () => {
    // The paused worker's step (fence 3) wrote its first line after the newer holder's (fence 4).
    const late = new Map([
      ["stale", run("stale", 1, 5_000, 8_000, 3)],
      ["newer", run("newer", 2, 4_000, 9_000, 4)],
    ]);
    const paused = new Map([
      [1, worker(1, [{ from: 1_000, to: 7_000 }])],
      [2, worker(2)],
    ]);
    assert.equal(findOverlaps(late, paused, new Set(["newer"]))[0]?.kind, "fenced", "the newer holder published");
    assert.equal(findOverlaps(late, paused, new Set(["stale"]))[0]?.kind, "live", "the stale one published");
  });

  test("a Redis that lost a grant between the two: the start order, not the fences (review helper-134)", () => {
    // A was granted 7, the crash lost it, B was granted 5 after it and published rightly.
    const regranted = new Map([
      ["A", run("A", 1, 1_000, 6_000, 7)],
      ["B", run("B", 2, 2_000, 9_000, 5)],
    ]);
    const paused = new Map([
      [1, worker(1, [{ from: 1_200, to: 8_000 }])],
      [2, worker(2)],
    ]);
    const loss = [{ from: 1_500, to: 1_600 }];
    assert.equal(findOverlaps(regranted, paused, new Set(["B"]), loss)[0]?.kind, "fenced");
    assert.equal(findOverlaps(regranted, paused, new Set(["A"]), loss)[0]?.kind, "live");
  });

  test("no pause: two controlled writers are counted even if neither published", () => {
    const [overlap] = findOverlaps(
      journal,
      new Map([
        [1, worker(1)],
        [2, worker(2)],
      ]),
      new Set(),
    );
    assert.equal(overlap?.kind, "live");
  });
});
