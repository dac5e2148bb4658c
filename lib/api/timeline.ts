/** `GET /api/runs/timeline?range=24h|7d`: the runs of a window, for the Runs page's charts. */
import { z } from "zod";
import { listRunsInWindow, type WindowRun } from "../runs/window";
import type { WebContext } from "../web/context";

export const TIMELINE_RANGES = { "24h": 86_400_000, "7d": 7 * 86_400_000 } as const;
export type TimelineRange = keyof typeof TIMELINE_RANGES;
/** Most runs one window returns (newest first); the chart aggregates what shares a pixel. */
export const TIMELINE_MAX_RUNS = 10_000;

export const timelineQuery = z.strictObject({
  range: z.enum(["24h", "7d"], { error: "must be 24h or 7d" }).default("24h"),
});

export interface Timeline {
  range: TimelineRange;
  since: number;
  until: number;
  runs: WindowRun[];
  /** More runs were created in the window than returned (the oldest are left out). */
  truncated: boolean;
  /** Each rebuild's time limit (ms), drawn on the duration trend. */
  timeLimits: Record<string, number>;
  serverTime: number;
}

export async function getTimeline(context: WebContext, query: z.output<typeof timelineQuery>): Promise<Timeline> {
  const until = Date.now();
  const since = until - TIMELINE_RANGES[query.range];
  const { runs, truncated } = await listRunsInWindow(
    context.connections.main,
    context.connections.keys,
    since,
    until,
    TIMELINE_MAX_RUNS,
  );
  const timeLimits = Object.fromEntries([...context.definitions.rebuilds.values()].map((d) => [d.name, d.timeLimit]));
  return { range: query.range, since, until, runs, truncated, timeLimits, serverTime: until };
}
