/**
 * A run's duration as far as it is known (lib/ui/format.ts formatRunDuration): a run someone else
 * closed ended unseen — at least as long as it was seen running, or at most until it was closed —
 * and says so; a run that ended itself reads as before. A worker killed 3 s into its step read
 * "aborted · 7 ms" (black-box helper-123).
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { formatDurationMs, formatLogLine, formatRunDuration, runDurationNote } from "../../lib/ui/format";

test("a run that ended itself: its duration, no note", () => {
  const run = { durationMs: 12_000, finishedAt: 1_012_000 };
  assert.equal(formatRunDuration(run), "12 s");
  assert.equal(runDurationNote(run), null);
  assert.equal(formatRunDuration({ durationMs: null, finishedAt: null }), "–");
});

test("closed by someone else after it was last seen running: at least that long", () => {
  const run = { durationMs: 7, finishedAt: 1_000_007, closedAt: 1_010_007 };
  assert.equal(formatRunDuration(run), "≥ 7 ms");
  assert.equal(runDurationNote(run), "ended unseen: last seen running 10 s before it was closed");
});

test("closed by someone else with no sign of life after its start: at most until it was closed", () => {
  const run = { durationMs: 45_000, finishedAt: 1_045_000, closedAt: 1_045_000 };
  assert.equal(formatRunDuration(run), "≤ 45 s");
  assert.equal(runDurationNote(run), "ended unseen: timed to when it was closed");
});

test("durations of two days and more read in days and hours (a yearly schedule's next tick), shorter ones as before", () => {
  assert.equal(formatDurationMs((2331 * 60 + 56) * 60_000), "97 d 3 h");
  assert.equal(formatDurationMs(48 * 3_600_000), "2 d 0 h");
  assert.equal(formatDurationMs(47 * 3_600_000 + 59 * 60_000), "47 h 59 min");
  assert.equal(formatDurationMs(-49 * 3_600_000), "-2 d 1 h");
  assert.equal(formatDurationMs(90_000), "1 min 30 s");
});

test("a run log line's stamp in the one time format, with its milliseconds; other lines as they are", () => {
  assert.equal(
    formatLogLine("2026-12-01T21:15:03.250Z step tile: wrote 12 tiles", "utc"),
    "2026-12-01 21:15:03.250 UTC step tile: wrote 12 tiles",
  );
  // The viewer's zone (this process's: TZ is whatever the test runs under), the same instant.
  const local = formatLogLine("2026-12-01T21:15:03.250Z x", "local");
  assert.match(local, /^\d{4}-\d\d-\d\d \d\d:\d\d:03\.250 UTC([+-]\d\d:\d\d)? x$/);
  assert.equal(formatLogLine("no stamp here", "utc"), "no stamp here");
  assert.equal(formatLogLine("2026-13-45T99:99:99.000Z bad date", "utc"), "2026-13-45T99:99:99.000Z bad date");
});
