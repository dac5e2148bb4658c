"use client";

import { scaleBand, scaleSqrt } from "@visx/scale";
import type { ApiRebuild } from "@/lib/api/rebuilds";
import { formatAbsolute, formatDurationMs } from "@/lib/ui/format";
import { RUN_STATUSES } from "@/lib/runs/types";
import { STATUS_COLOURS } from "./status-badge";

const WIDTH = 240;
const HEIGHT = 32;
const SLOTS = 30;

/**
 * The last 30 runs, oldest left: bar colour = outcome, bar height = duration (square-root scale,
 * so a 10 s run next to a 10 min one is still visible); skips and queued jobs, which did no
 * work, are short grey ticks. The longest duration is written beside the strip as its scale.
 */
export function RunStrip({ runs, label }: { runs: ApiRebuild["recentRuns"]; label: string }) {
  if (runs.length === 0) return <span className="text-xs text-slate-500">no runs yet</span>;
  const timed = runs.some((r) => r.durationMs !== null && r.durationMs > 0);
  const longest = Math.max(1, ...runs.map((r) => r.durationMs ?? 0));
  const x = scaleBand<number>({ domain: [...Array(SLOTS).keys()], range: [0, WIDTH], padding: 0.2 });
  const height = scaleSqrt<number>({ domain: [0, longest], range: [3, HEIGHT - 2] });
  const offset = SLOTS - runs.length; // newest at the right edge
  const counts = new Map<string, number>();
  for (const run of runs) counts.set(run.status, (counts.get(run.status) ?? 0) + 1);
  const summary = [...counts].map(([status, n]) => `${n} ${status}`).join(", ");
  return (
    <div className="flex flex-wrap items-end gap-x-2">
      {/* Scales down (viewBox) where the page is narrower than the strip: the newest runs are at the right. */}
      <svg
        width={WIDTH}
        height={HEIGHT}
        viewBox={`0 0 ${WIDTH} ${HEIGHT}`}
        role="img"
        aria-label={`last ${runs.length} runs of ${label}: ${summary}`}
        className="block h-auto max-w-full min-w-0"
        data-chart="run-strip"
      >
        <line x1={0} x2={WIDTH} y1={HEIGHT - 0.5} y2={HEIGHT - 0.5} className="stroke-slate-300" />
        {runs.map((run, i) => {
          const worked = run.status !== "skipped" && run.status !== "queued";
          const h = worked ? height(run.durationMs ?? 0) : 3;
          return (
            <rect
              key={run.id}
              data-mark="run"
              data-status={run.status}
              x={x(i + offset)}
              y={HEIGHT - 1 - h}
              width={x.bandwidth()}
              height={h}
              fill={STATUS_COLOURS[run.status]}
            >
              <title>{`${run.status} · ${run.startedAt ? `started ${formatAbsolute(run.startedAt, "utc")}` : `queued ${formatAbsolute(run.createdAt, "utc")}`}${run.durationMs !== null ? ` · ${formatDurationMs(run.durationMs)}` : ""}`}</title>
            </rect>
          );
        })}
      </svg>
      {timed ? (
        <span className="text-xs whitespace-nowrap text-slate-500" title="height scale: the longest of these runs">
          ≤ {formatDurationMs(longest)}
        </span>
      ) : null}
    </div>
  );
}

/** What the strip's colours mean (shown once above the table). */
export function RunStripLegend() {
  return (
    <ul aria-label="Run colours" className="flex flex-wrap gap-x-4 gap-y-1 text-xs text-slate-600">
      {RUN_STATUSES.map((status) => (
        <li key={status} className="flex items-center gap-1">
          <span
            aria-hidden
            className="inline-block h-3 w-3 rounded-sm"
            style={{ background: STATUS_COLOURS[status] }}
          />
          {status}
        </li>
      ))}
      <li className="text-slate-500">bar height: duration; grey tick: skipped or queued (no work)</li>
    </ul>
  );
}
