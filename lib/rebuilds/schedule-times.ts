/**
 * When a schedule's ticks fall: one place that reads a cron expression in its zone, with the
 * library and options BullMQ's job scheduler uses (`getNextMillis`: cron-parser with `tz`), so the
 * dashboard's next run, the banner's missed tick and the scheduleMissed alert expect the ticks the
 * scheduler makes — across daylight-saving changes too (a time that does not exist that day runs
 * at the first one after it; a time that occurs twice runs once).
 */
import { CronExpressionParser } from "cron-parser";

export interface ScheduleTimes {
  cron: string;
  /** IANA zone. */
  tz: string;
}

/** The first tick strictly after `at` (ms). */
export function nextTickAfter(schedule: ScheduleTimes, at: number): number {
  return CronExpressionParser.parse(schedule.cron, { tz: schedule.tz, currentDate: new Date(at) })
    .next()
    .getTime();
}

/**
 * The last tick strictly before `at` (ms): the last the scheduler, which only ever goes forward,
 * made before then. cron-parser's own `prev()` disagrees with its `next()` around daylight-saving
 * changes — it skips the night a time does not exist (02:00 ran at 03:00) and names the second
 * 02:00 of the night one occurs twice (the scheduler ran the first) — so it only gives a start:
 * two of its ticks back, from where `next()` walks up to `at`.
 */
export function lastTickBefore(schedule: ScheduleTimes, at: number): number {
  const backwards = CronExpressionParser.parse(schedule.cron, { tz: schedule.tz, currentDate: new Date(at) });
  backwards.prev();
  const start = backwards.prev().getTime();
  const forwards = CronExpressionParser.parse(schedule.cron, { tz: schedule.tz, currentDate: new Date(start - 1) });
  let last = start;
  for (let tick = forwards.next().getTime(); tick < at; tick = forwards.next().getTime()) last = tick;
  return last;
}

/** The ticks after `from` up to `until` (ms), oldest first, at most `max`. */
export function ticksBetween(schedule: ScheduleTimes, from: number, until: number, max: number): number[] {
  const expression = CronExpressionParser.parse(schedule.cron, {
    tz: schedule.tz,
    currentDate: new Date(from),
    endDate: new Date(until),
  });
  const ticks: number[] = [];
  while (ticks.length < max && expression.hasNext()) ticks.push(expression.next().getTime());
  return ticks;
}
