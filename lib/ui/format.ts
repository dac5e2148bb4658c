/**
 * The one way claimwatch writes durations and times, on every page and in API messages:
 * - absolute: `2026-12-01 21:15:03 UTC` or, in the browser's zone, `2026-12-01 22:15:03 UTC+01:00`
 *   (4-digit year, 24-hour clock, the zone always written out: never `12/1/26, 9:15 PM`);
 * - relative: `3 min 12 s ago`, `in 42 s` (with the absolute time on hover, see components/time);
 * - durations: `850 ms`, `42 s`, `3 min 12 s`, `2 h 5 min`.
 * Pure functions (no React, no Redis): used by components and by lib/api's preview texts.
 */
import { formatAbsolute, type TimeZoneChoice } from "../time-text";

export function formatDurationMs(ms: number | null | undefined): string {
  if (ms === null || ms === undefined || !Number.isFinite(ms)) return "–";
  const negative = ms < 0;
  const abs = Math.abs(ms);
  if (abs > 0 && abs < 1_000) return `${negative ? "-" : ""}${Math.round(abs)} ms`;
  let s = Math.round(abs / 1000);
  const h = Math.floor(s / 3600);
  s -= h * 3600;
  const m = Math.floor(s / 60);
  s -= m * 60;
  // Two days and more in days (a yearly schedule's next tick read "in 2331 h 56 min": helper-143).
  const text =
    h >= 48 ? `${Math.floor(h / 24)} d ${h % 24} h` : h > 0 ? `${h} h ${m} min` : m > 0 ? `${m} min ${s} s` : `${s} s`;
  return negative ? `-${text}` : text;
}

/**
 * A run's duration as far as it is known. A run someone else closed (`closedAt`: the sweep, its
 * job's next attempt) ended unseen: its duration runs to when it was last seen running — at least
 * that long ("≥") — or, when nothing told that, to when it was closed — at most that long ("≤").
 * A worker killed 3 s into its step read "aborted · 7 ms" (black-box helper-123).
 */
export function formatRunDuration(run: {
  durationMs: number | null;
  finishedAt: number | null;
  closedAt?: number | null | undefined;
}): string {
  const text = formatDurationMs(run.durationMs);
  if (run.durationMs === null || !run.closedAt || run.finishedAt === null) return text;
  return run.finishedAt < run.closedAt ? `≥ ${text}` : `≤ ${text}`;
}

/** What `formatRunDuration`'s "≥" or "≤" means for this run, for a tooltip; null when the duration was seen. */
export function runDurationNote(run: {
  finishedAt: number | null;
  closedAt?: number | null | undefined;
}): string | null {
  if (!run.closedAt || run.finishedAt === null) return null;
  return run.finishedAt < run.closedAt
    ? `ended unseen: last seen running ${formatDurationMs(run.closedAt - run.finishedAt)} before it was closed`
    : "ended unseen: timed to when it was closed";
}

export { formatAbsolute, type TimeZoneChoice };

/** `3 min ago` / `in 42 s` / `just now` (under a second either way). */
export function formatRelative(ms: number | null | undefined, now: number): string {
  if (ms === null || ms === undefined || !Number.isFinite(ms) || ms <= 0) return "–";
  const delta = now - ms;
  if (Math.abs(delta) < 1_000) return "just now";
  const text = formatDurationMs(Math.abs(delta) < 1_000 ? 1_000 : Math.abs(delta));
  return delta > 0 ? `${text} ago` : `in ${text}`;
}

const LOG_STAMP = /^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)\.(\d{3})Z /;

/**
 * A run log line as the dashboard shows it: the worker's ISO stamp (`2026-12-01T21:15:03.250Z`)
 * in the one time format, with its milliseconds (`2026-12-01 21:15:03.250 UTC`, or the viewer's
 * zone). A line without a stamp is shown as it is.
 */
export function formatLogLine(line: string, zone: TimeZoneChoice = "utc"): string {
  const stamp = LOG_STAMP.exec(line);
  if (!stamp) return line;
  const ms = Date.parse(`${stamp[1]}.${stamp[2]}Z`);
  if (!Number.isFinite(ms)) return line;
  const text = formatAbsolute(ms, zone);
  // `… 21:15:03 UTC` → `… 21:15:03.250 UTC`: the zone follows the seconds.
  const space = text.lastIndexOf(" ");
  return `${text.slice(0, space)}.${stamp[2]}${text.slice(space)} ${line.slice(stamp[0].length)}`;
}

/** ISO 8601 for `<time dateTime>` (machine-readable; never shown). */
export function isoOf(ms: number): string {
  return new Date(ms).toISOString();
}

/**
 * What a skip count means wherever one is shown: the claim-held skips since the rebuild (+ tenant)
 * last completed a build, not only those behind its current holder (a request skipped behind a run
 * that then failed is still not served).
 */
export const SKIPS_TITLE =
  "requests skipped because the claim was held for their version (claim-held), since this rebuild last completed a build: they ride on the holder's run; if it failed, they were not served. Already-rebuilt skips do not count";
