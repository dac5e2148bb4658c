/**
 * The timeline counters' buckets as the API sends them (`GET /api/runs/timeline`, view
 * "buckets"): columnar per lane, so a week of ~100 lanes × 56 buckets is a few hundred kB of
 * numbers instead of ~6 000 objects repeating their lane, start and outcome names (0.9 MB at
 * 200k runs, BENCHMARKS.md). Pure functions, shared by the API (`toCountedLanes`) and the browser
 * (`countedBuckets`), so the wire layout has one owner.
 *
 *   first      start of bucket 0 (ms); bucket i starts at first + i × bucketMs
 *   lane.at    indexes of the lane's buckets that counted runs, ascending (empty ones are left out,
 *              and so are lanes without any)
 *   lane.runs  per outcome with runs in the lane: runs per bucket of `at` (0: none there)
 *   lane.meanMs  per outcome: their mean duration per bucket of `at` (whole ms, 0 where none);
 *              skips have none (their duration is not shown: a skip does no work)
 */
import type { TimelineBucket } from "./buckets";
import type { FinalRunStatus } from "./transitions";

export interface CountedLane {
  rebuild: string;
  /** Reading one rebuild's tenant lanes: the tenant (null: its runs without one); else null. */
  tenant: string | null;
  at: number[];
  runs: Partial<Record<FinalRunStatus, number[]>>;
  meanMs: Partial<Record<FinalRunStatus, number[]>>;
}

export interface CountedLanes {
  first: number;
  lanes: CountedLane[];
}

/** Outcomes whose durations are not sent (a skip's duration says nothing). */
const NO_DURATION = new Set<FinalRunStatus>(["skipped"]);

/** Buckets (aligned to `bucketMs`, from lib/runs/buckets.ts) into lanes, from the bucket of `since`. */
export function toCountedLanes(buckets: readonly TimelineBucket[], since: number, bucketMs: number): CountedLanes {
  const first = since - (since % bucketMs);
  const byLane = new Map<string, TimelineBucket[]>();
  for (const bucket of buckets) {
    const id = `${bucket.rebuild}\u0000${bucket.tenant ?? ""}`;
    const lane = byLane.get(id) ?? [];
    lane.push(bucket);
    byLane.set(id, lane);
  }
  const lanes: CountedLane[] = [];
  for (const laneBuckets of byLane.values()) {
    laneBuckets.sort((a, b) => a.start - b.start);
    const statuses = new Set<FinalRunStatus>();
    for (const bucket of laneBuckets) {
      for (const [status, n] of Object.entries(bucket.counts)) if (n) statuses.add(status as FinalRunStatus);
    }
    if (statuses.size === 0) continue;
    const kept = laneBuckets.filter((bucket) => Object.values(bucket.counts).some((n) => n));
    const lane: CountedLane = {
      rebuild: kept[0]!.rebuild,
      tenant: kept[0]!.tenant,
      at: kept.map((bucket) => Math.round((bucket.start - first) / bucketMs)),
      runs: {},
      meanMs: {},
    };
    for (const status of statuses) {
      lane.runs[status] = kept.map((bucket) => bucket.counts[status] ?? 0);
      if (NO_DURATION.has(status)) continue;
      lane.meanMs[status] = kept.map((bucket) => {
        const n = bucket.counts[status] ?? 0;
        return n ? Math.round((bucket.durationMs[status] ?? 0) / n) : 0;
      });
    }
    lanes.push(lane);
  }
  lanes.sort((a, b) => a.rebuild.localeCompare(b.rebuild) || (a.tenant ?? "").localeCompare(b.tenant ?? ""));
  return { first, lanes };
}

/**
 * The lanes back as one bucket per lane and non-empty bucket (summed durations from the means:
 * within half a ms per run of the counters' sums).
 */
export function countedBuckets(counted: CountedLanes, bucketMs: number): TimelineBucket[] {
  const out: TimelineBucket[] = [];
  for (const lane of counted.lanes) {
    lane.at.forEach((index, i) => {
      const bucket: TimelineBucket = {
        rebuild: lane.rebuild,
        tenant: lane.tenant,
        start: counted.first + index * bucketMs,
        counts: {},
        durationMs: {},
      };
      for (const [status, runs] of Object.entries(lane.runs) as [FinalRunStatus, number[]][]) {
        const n = runs[i] ?? 0;
        if (!n) continue;
        bucket.counts[status] = n;
        bucket.durationMs[status] = n * (lane.meanMs[status]?.[i] ?? 0);
      }
      out.push(bucket);
    });
  }
  return out.sort((a, b) => a.start - b.start);
}
