/**
 * A schedule's ticks across daylight-saving changes, as the dashboard, the banner and the
 * scheduleMissed alert expect them (lib/rebuilds/schedule-times.ts), against the ticks BullMQ's
 * job scheduler makes (`getNextMillis`): the README's own schedule, `0 2 * * *` in Europe/Berlin,
 * meets both changes of the year. cron-parser's `prev()` disagreed with the scheduler there: the
 * banner then checked the second 02:00 of the fall-back night (a tick the scheduler never makes:
 * "missed" for a day) and skipped the spring night's 03:00 tick (a real miss unseen).
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { getNextMillis } from "bullmq";
import { lastTickBefore, nextTickAfter, ticksBetween } from "../../lib/rebuilds/schedule-times";

/** BullMQ's ticks from `from` to `until`: each next one from the last, as its scheduler chains them. */
function schedulerTicks(pattern: string, tz: string, from: number, until: number): number[] {
  const ticks: number[] = [];
  for (let at = from; ;) {
    const next = getNextMillis(at, { pattern, tz });
    if (next === undefined || next > until) return ticks;
    ticks.push(next);
    at = next;
  }
}

const inBerlin = new Intl.DateTimeFormat("en-CA", {
  timeZone: "Europe/Berlin",
  year: "numeric",
  month: "2-digit",
  day: "2-digit",
  hour: "2-digit",
  minute: "2-digit",
  hourCycle: "h23",
  timeZoneName: "short",
});
const berlin = (ticks: number[]) => ticks.map((t) => inBerlin.format(t));

for (const [change, from, until] of [
  ["spring forward (02:00 does not exist)", "2027-03-26T12:00:00Z", "2027-03-30T12:00:00Z"],
  ["fall back (02:00 occurs twice)", "2027-10-29T12:00:00Z", "2027-11-02T12:00:00Z"],
] as const) {
  test(`0 2 * * * in Europe/Berlin across ${change}: one tick a day, as BullMQ's scheduler makes them`, () => {
    const schedule = { cron: "0 2 * * *", tz: "Europe/Berlin" };
    const [a, b] = [Date.parse(from), Date.parse(until)];
    const ours = ticksBetween(schedule, a, b, 100);
    assert.deepEqual(ours, schedulerTicks(schedule.cron, schedule.tz, a, b));
    assert.equal(ours.length, 4, berlin(ours).join(", "));
    const local = berlin(ours);
    if (change.startsWith("spring")) {
      // The night 02:00 does not exist, the tick is at 03:00 (GMT+2, summer time), not skipped.
      assert.deepEqual(local, [
        "2027-03-27, 02:00 GMT+1",
        "2027-03-28, 03:00 GMT+2",
        "2027-03-29, 02:00 GMT+2",
        "2027-03-30, 02:00 GMT+2",
      ]);
    } else {
      assert.deepEqual(local, [
        "2027-10-30, 02:00 GMT+2",
        "2027-10-31, 02:00 GMT+2",
        "2027-11-01, 02:00 GMT+1",
        "2027-11-02, 02:00 GMT+1",
      ]);
    }
    // The banner's "last tick" (what it checks was served) and the dashboard's "next run" name the
    // scheduler's ticks at every moment: each quarter hour of the window, and around each tick.
    const moments = [...Array.from({ length: (b - a) / 900_000 - 96 }, (_, i) => a + 86_400_000 + i * 900_000)];
    for (const tick of ours) moments.push(tick - 1, tick, tick + 1);
    for (const at of moments) {
      const before = ours.filter((t) => t < at);
      if (before.length > 0)
        assert.equal(lastTickBefore(schedule, at), before.at(-1), `last tick before ${new Date(at).toISOString()}`);
      const after = ours.find((t) => t > at);
      if (after !== undefined)
        assert.equal(nextTickAfter(schedule, at), after, `next tick after ${new Date(at).toISOString()}`);
    }
  });
}

test("an hourly schedule in Europe/Berlin on the fall-back night: both 02:00s, as BullMQ's scheduler makes them", () => {
  const schedule = { cron: "0 * * * *", tz: "Europe/Berlin" };
  const [a, b] = [Date.parse("2027-10-30T22:30:00Z"), Date.parse("2027-10-31T03:30:00Z")];
  const ours = ticksBetween(schedule, a, b, 100);
  assert.deepEqual(ours, schedulerTicks(schedule.cron, schedule.tz, a, b));
  assert.deepEqual(
    ours.map((t) => new Date(t).toISOString()),
    [
      "2027-10-30T23:00:00.000Z",
      "2027-10-31T00:00:00.000Z",
      "2027-10-31T01:00:00.000Z",
      "2027-10-31T02:00:00.000Z",
      "2027-10-31T03:00:00.000Z",
    ],
  );
});
