/**
 * The timeline counters of a window (layout: timeline-counters.ts), merged into buckets of
 * `bucketMs` (a whole number of counter hours, aligned to the epoch): one pipelined HGETALL per
 * hour — 25 for a day, 169 for a week — whatever the number of runs. The window is widened to
 * whole hours (an hour's runs are counted together).
 */
import type { Redis } from "ioredis";
import type { RedisKeys } from "../redis/keys";
import { bucketStartOf, forEachLaneCount, TIMELINE_BUCKET_MS } from "./timeline-counters";
import { FINAL_STATUSES, type FinalRunStatus } from "./transitions";

export interface TimelineBucket {
  rebuild: string;
  /**
   * Reading one rebuild's tenant lanes: the tenant (null: its runs without one). Reading rebuild
   * lanes: null (the rebuild's tenants summed). Either way the lane is named as a run's would be.
   */
  tenant: string | null;
  /** The bucket's start (ms); it spans `bucketMs`. */
  start: number;
  /** Runs that ended in each final status. */
  counts: Partial<Record<FinalRunStatus, number>>;
  /** Their summed durations (ms), per status. */
  durationMs: Partial<Record<FinalRunStatus, number>>;
}

export interface BucketWindow {
  since: number;
  until: number;
  /** A multiple of TIMELINE_BUCKET_MS. */
  bucketMs: number;
  /** One rebuild's tenant lanes; without it, one lane per rebuild. */
  rebuild?: string;
}

const FINAL = new Set<string>(FINAL_STATUSES);

export async function readTimelineBuckets(
  client: Pick<Redis, "pipeline">,
  keys: RedisKeys,
  window: BucketWindow,
): Promise<TimelineBucket[]> {
  if (window.bucketMs % TIMELINE_BUCKET_MS !== 0) throw new Error(`bucketMs must be whole hours`);
  const hours: number[] = [];
  for (let hour = bucketStartOf(window.since); hour <= window.until; hour += TIMELINE_BUCKET_MS) hours.push(hour);
  const pipeline = client.pipeline();
  for (const hour of hours) pipeline.hgetall(keys.timelineBucket(hour, window.rebuild));
  const replies = (await pipeline.exec()) ?? [];
  // lane → bucket start → bucket: no key strings built per lane and hour.
  const byLane = new Map<string, Map<number, TimelineBucket>>();
  const out: TimelineBucket[] = [];
  hours.forEach((hour, i) => {
    const [error, reply] = replies[i] ?? [];
    if (error) throw error;
    const start = hour - (hour % window.bucketMs);
    const fields = (reply ?? {}) as Record<string, string>;
    for (const lane in fields) {
      let starts = byLane.get(lane);
      if (!starts) byLane.set(lane, (starts = new Map()));
      let bucket = starts.get(start);
      if (!bucket) {
        bucket = window.rebuild
          ? { rebuild: window.rebuild, tenant: lane || null, start, counts: {}, durationMs: {} }
          : { rebuild: lane, tenant: null, start, counts: {}, durationMs: {} };
        starts.set(start, bucket);
        out.push(bucket);
      }
      const { counts, durationMs: summed } = bucket;
      forEachLaneCount(fields[lane]!, (status, runs, durationMs) => {
        if (!FINAL.has(status)) return;
        const s = status as FinalRunStatus;
        counts[s] = (counts[s] ?? 0) + runs;
        summed[s] = (summed[s] ?? 0) + durationMs;
      });
    }
  });
  // Hours are read in order, so buckets are created in order of their start.
  return out;
}
