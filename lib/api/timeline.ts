/**
 * `GET /api/runs/timeline?range=24h|7d[&rebuild=][&view=auto|buckets]`: the runs of a window, for
 * the Runs page's charts — one by one when they are few, as counted buckets when they are many.
 *
 *   view "runs"    every run started in the window (a day holding at most TIMELINE_RUN_LIMIT)
 *   view "buckets" the timeline counters (lib/runs/timeline-counters.ts) of the window, per lane
 *                  and TIMELINE_BUCKET_MS[range], columnar in `counted` (lib/runs/counted-lanes.ts:
 *                  bucket starts implied by index, counts and mean durations as arrays, empty
 *                  buckets and lanes left out); `runs` then holds only the runs in flight (queued,
 *                  running), which no counter has yet. Used for 7 d always, for 24 h when the
 *                  window holds more runs, and when asked (`view=buckets`).
 * Lanes: one per rebuild (tenants summed) in buckets; with `rebuild`, that rebuild's tenants.
 * A bucket counts the runs that finished, including runs whose records were trimmed since (the
 * counters are history; the runs list shows what is kept).
 */
import { z } from "zod";
import { NAME_PATTERN as NAME } from "../names";
import { unknownRebuildProblem } from "../rebuilds/definitions";
import { readTimelineBuckets, type TimelineBucket } from "../runs/buckets";
import { toCountedLanes, type CountedLanes } from "../runs/counted-lanes";
import { bucketStartOf, TIMELINE_BUCKET_MS as COUNTER_HOUR } from "../runs/timeline-counters";
import { listRunsInWindow, type WindowRun } from "../runs/window";
import type { WebContext } from "../web/context";
import { badRequest } from "./errors";

export const TIMELINE_RANGES = { "24h": 86_400_000, "7d": 7 * 86_400_000 } as const;
export type TimelineRange = keyof typeof TIMELINE_RANGES;
/**
 * Most runs a window returns one by one: beyond, it returns buckets. Reading a run costs one HMGET
 * (10 000 of them took ~0.9 s at 1M runs, BENCHMARKS.md); 2 000 still draw one mark each.
 */
export const TIMELINE_RUN_LIMIT = 2_000;
/** Bucket width per range: an hour (24 per day), three hours (56 per week). */
export const TIMELINE_BUCKET_MS: Record<TimelineRange, number> = { "24h": COUNTER_HOUR, "7d": 3 * COUNTER_HOUR };
/** Runs in flight drawn over the buckets, per status (the sweep keeps these few). */
const IN_FLIGHT_MAX = 500;

export const timelineQuery = z.strictObject({
  range: z.enum(["24h", "7d"], { error: "must be 24h or 7d" }).default("24h"),
  rebuild: z.string().regex(NAME, "must be a rebuild name").optional(),
  view: z.enum(["auto", "buckets"], { error: "must be auto or buckets" }).default("auto"),
});

export interface Timeline {
  range: TimelineRange;
  since: number;
  until: number;
  /** The rebuild whose tenant lanes these are, or null (every rebuild). */
  rebuild: string | null;
  view: "runs" | "buckets";
  /** view "runs": the runs of the window; view "buckets": only those in flight. */
  runs: WindowRun[];
  /** More runs than returned (view "runs": never, it is chosen only when they fit; in flight: capped). */
  truncated: boolean;
  /** view "buckets": finished runs counted per lane and bucket (`countedBuckets` reads it); null in view "runs". */
  counted: CountedLanes | null;
  /** Width of a bucket (ms), or null in view "runs". */
  bucketMs: number | null;
  /** Runs started in the window (all statuses, as indexed now). */
  total: number;
  /** Each rebuild's time limit (ms), drawn on the duration trend. */
  timeLimits: Record<string, number>;
  serverTime: number;
}

/** The first whole counter hour at or after `since` (a counter bucket holds runs started in its hour). */
const wholeHoursFrom = (since: number) => bucketStartOf(since) + (since % COUNTER_HOUR === 0 ? 0 : COUNTER_HOUR);

/**
 * Whether retention trimmed runs of the window: the counters count more finished runs started in
 * its whole hours before the current one (a run that began and ended since the index was read
 * would count in this hour: review helper-184) than the run index still holds (in flight included). Then the runs one by one
 * would show what retention kept, not what happened (black-box helper-181: about 100 of 4 000).
 */
async function trimmedWithin(
  from: number,
  to: number,
  kept: Promise<number>,
  buckets: Promise<TimelineBucket[]>,
): Promise<boolean> {
  const [held, counted] = await Promise.all([kept, buckets]);
  return (
    counted
      .filter((bucket) => bucket.start >= from && bucket.start < to)
      .reduce((sum, bucket) => sum + Object.values(bucket.counts).reduce((a, b) => a + (b ?? 0), 0), 0) > held
  );
}

export async function getTimeline(context: WebContext, query: z.output<typeof timelineQuery>): Promise<Timeline> {
  const { main, keys } = context.connections;
  if (query.rebuild && !context.definitions.rebuilds.has(query.rebuild)) {
    throw badRequest(`rebuild: ${unknownRebuildProblem(context.definitions, query.rebuild)}`);
  }
  const until = Date.now();
  const since = until - TIMELINE_RANGES[query.range];
  const filter = query.rebuild ? { rebuild: query.rebuild } : {};
  const timeLimits = Object.fromEntries([...context.definitions.rebuilds.values()].map((d) => [d.name, d.timeLimit]));
  const base = { range: query.range, since, until, rebuild: query.rebuild ?? null, timeLimits, serverTime: until };
  const total = await main.zcount(keys.runIndex(filter), since, until);
  const bucketMs = TIMELINE_BUCKET_MS[query.range];
  let read: Promise<TimelineBucket[]> | null = null;
  const readBuckets = () => (read ??= readTimelineBuckets(main, keys, { since, until, bucketMs, ...filter }));
  if (
    query.view === "auto" &&
    query.range === "24h" &&
    total <= TIMELINE_RUN_LIMIT &&
    !(await trimmedWithin(
      wholeHoursFrom(since),
      bucketStartOf(until),
      main.zcount(keys.runIndex(filter), wholeHoursFrom(since), `(${bucketStartOf(until)}`),
      readBuckets(),
    ))
  ) {
    const { runs, truncated } = await listRunsInWindow(main, keys, since, until, TIMELINE_RUN_LIMIT, filter);
    return { ...base, view: "runs", runs, truncated, counted: null, bucketMs: null, total };
  }
  const [buckets, running, queued] = await Promise.all([
    readBuckets(),
    listRunsInWindow(main, keys, since, until, IN_FLIGHT_MAX, { ...filter, status: "running" }),
    listRunsInWindow(main, keys, since, until, IN_FLIGHT_MAX, { ...filter, status: "queued" }),
  ]);
  return {
    ...base,
    view: "buckets",
    runs: [...running.runs, ...queued.runs],
    truncated: running.truncated || queued.truncated,
    counted: toCountedLanes(buckets, since, bucketMs),
    bucketMs,
    total,
  };
}
