"use client";

/**
 * The Runs page's pictures, drawn with visx (scales, axes and shapes as React SVG): every mark is
 * an element with its run's id and status, so it can be hovered, clicked, read by a screen reader
 * and checked by a test. Past a few runs per pixel a lane draws buckets instead of runs (the
 * count in each), so 10 000 runs stay a few thousand elements at most. Marks link to their run
 * for the mouse; they are out of the tab order (the runs table below is the keyboard way).
 */
import { useQuery } from "@tanstack/react-query";
import { AxisBottom, AxisLeft } from "@visx/axis";
import { Group } from "@visx/group";
import { scaleLinear, scaleTime } from "@visx/scale";
import { LinePath } from "@visx/shape";
import Link from "next/link";
import { useState } from "react";
import type { Timeline } from "@/lib/api/timeline";
import type { WindowRun } from "@/lib/runs/window";
import type { RunStatus } from "@/lib/runs/types";
import { formatAbsolute, formatDurationMs } from "@/lib/ui/format";
import { LIVE_POLL_MS, timelineQuery } from "@/lib/ui/queries";
import { usePollEvery } from "./live-events";
import { RunStripLegend } from "./run-strip";
import { STATUS_COLOURS } from "./status-badge";
import { useNow } from "./use-now";

const WIDTH = 1000;
const LABEL_WIDTH = 170;
const LANE_HEIGHT = 22;
const AXIS_HEIGHT = 26;
const BUCKET_PX = 3;
/** Which status a bucket of several runs shows: the one an operator must see first. */
const SEVERITY: RunStatus[] = [
  "failed",
  "aborted",
  "superseded",
  "cancelled",
  "running",
  "queued",
  "rebuilt",
  "skipped",
  "deferred",
];

const laneOf = (run: Pick<WindowRun, "rebuild" | "tenant">) =>
  run.tenant ? `${run.rebuild} / ${run.tenant}` : run.rebuild;
const tickText = (range: string) => (d: Date | { valueOf(): number }) => {
  const text = formatAbsolute(d.valueOf(), "local");
  return range === "24h" ? text.slice(11, 16) : text.slice(5, 10);
};

export function RunCharts() {
  const [range, setRange] = useState<"24h" | "7d">("24h");
  const { data, error } = useQuery({ ...timelineQuery(range), refetchInterval: usePollEvery(LIVE_POLL_MS * 5) });
  return (
    <section aria-labelledby="charts-title" className="space-y-4 rounded border border-slate-200 bg-white p-3">
      <div className="flex flex-wrap items-center gap-3">
        <h2 id="charts-title" className="font-semibold">
          Timeline
        </h2>
        <div role="group" aria-label="Time range" className="flex gap-1 text-sm">
          {(["24h", "7d"] as const).map((r) => (
            <button
              key={r}
              type="button"
              aria-pressed={range === r}
              onClick={() => setRange(r)}
              className={`rounded border px-2 py-0.5 ${range === r ? "border-slate-900 bg-slate-900 text-white" : "border-slate-300"}`}
            >
              last {r}
            </button>
          ))}
        </div>
        {data ? (
          <span className="text-xs text-slate-600">
            {data.runs.length} runs{data.truncated ? " (the newest 10 000)" : ""}
          </span>
        ) : null}
      </div>
      {error ? <p className="text-sm text-red-700">Could not load the timeline: {error.message}</p> : null}
      <RunStripLegend />
      {data ? <RunsTimeline timeline={data} /> : <p className="text-sm text-slate-600">Loading…</p>}
      {data ? <DurationTrend timeline={data} /> : null}
    </section>
  );
}

export function RunsTimeline({ timeline }: { timeline: Timeline }) {
  const now = useNow();
  const lanes = [...new Set(timeline.runs.map(laneOf))].sort();
  if (lanes.length === 0) return <p className="text-sm text-slate-600">No runs in this window.</p>;
  const plotWidth = WIDTH - LABEL_WIDTH - 10;
  const height = lanes.length * LANE_HEIGHT + AXIS_HEIGHT;
  const x = scaleTime<number>({ domain: [timeline.since, timeline.until], range: [0, plotWidth], clamp: true });
  const byLane = new Map<string, WindowRun[]>(lanes.map((lane) => [lane, []]));
  for (const run of timeline.runs) byLane.get(laneOf(run))!.push(run);
  return (
    <svg
      viewBox={`0 0 ${WIDTH} ${height}`}
      className="block h-auto w-full"
      role="figure"
      aria-label={`Runs timeline, last ${timeline.range}: ${timeline.runs.length} runs in ${lanes.length} lanes`}
      data-chart="timeline"
    >
      <Group left={LABEL_WIDTH}>
        {lanes.map((lane, i) => {
          const runs = byLane.get(lane)!;
          const y = i * LANE_HEIGHT;
          const span = (run: WindowRun) => {
            const start = run.startedAt ?? run.createdAt;
            const end = run.finishedAt ?? (run.status === "running" ? now : start);
            return [x(start), Math.max(x(start) + 2, x(end))] as const;
          };
          const aggregate = runs.length > plotWidth / BUCKET_PX / 2;
          return (
            <g key={lane} data-lane={lane}>
              <rect
                x={0}
                y={y}
                width={plotWidth}
                height={LANE_HEIGHT}
                className={i % 2 ? "fill-slate-50" : "fill-white"}
              />
              <text x={-8} y={y + LANE_HEIGHT / 2} dy="0.32em" textAnchor="end" className="fill-slate-700 text-[12px]">
                {lane}
              </text>
              {aggregate
                ? bucketsOf(runs, (run) => span(run)[0]).map((bucket) => (
                    <rect
                      key={bucket.px}
                      data-mark="bucket"
                      data-status={bucket.status}
                      data-count={bucket.count}
                      x={bucket.px}
                      y={y + 4}
                      width={BUCKET_PX}
                      height={LANE_HEIGHT - 8}
                      fill={STATUS_COLOURS[bucket.status]}
                    >
                      <title>{`${bucket.count} runs from ${formatAbsolute(x.invert(bucket.px).valueOf(), "utc")}: ${bucket.summary}`}</title>
                    </rect>
                  ))
                : runs.map((run) => {
                    const [x1, x2] = span(run);
                    return (
                      <Link key={run.id} href={`/runs/${run.id}`} tabIndex={-1}>
                        <rect
                          data-mark="run"
                          data-run-id={run.id}
                          data-status={run.status}
                          x={x1}
                          y={y + 4}
                          width={x2 - x1}
                          height={LANE_HEIGHT - 8}
                          rx={1}
                          fill={STATUS_COLOURS[run.status]}
                        >
                          <title>{`${run.id}: ${run.status}, ${run.startedAt ? `started ${formatAbsolute(run.startedAt, "utc")}` : `queued ${formatAbsolute(run.createdAt, "utc")}`}${run.durationMs !== null ? `, ${formatDurationMs(run.durationMs)}` : ""}`}</title>
                        </rect>
                      </Link>
                    );
                  })}
            </g>
          );
        })}
        <AxisBottom
          top={lanes.length * LANE_HEIGHT}
          scale={x}
          numTicks={8}
          tickFormat={tickText(timeline.range)}
          stroke="currentColor"
          tickStroke="currentColor"
          tickLabelProps={{ fill: "currentColor", fontSize: 11, textAnchor: "middle" }}
        />
      </Group>
    </svg>
  );
}

function bucketsOf(runs: WindowRun[], xOf: (run: WindowRun) => number) {
  const buckets = new Map<number, Map<RunStatus, number>>();
  for (const run of runs) {
    const px = Math.floor(xOf(run) / BUCKET_PX) * BUCKET_PX;
    const counts = buckets.get(px) ?? new Map<RunStatus, number>();
    counts.set(run.status, (counts.get(run.status) ?? 0) + 1);
    buckets.set(px, counts);
  }
  return [...buckets].map(([px, counts]) => ({
    px,
    count: [...counts.values()].reduce((a, b) => a + b, 0),
    status: SEVERITY.find((s) => counts.has(s)) ?? "rebuilt",
    summary: [...counts].map(([s, n]) => `${n} ${s}`).join(", "),
  }));
}

const TREND_HEIGHT = 220;
const TREND_MARGIN = { top: 10, right: 20, bottom: 26, left: 70 };
/** Rolling percentiles over this many runs. */
const ROLLING = 20;

const percentileOf = (values: number[], p: number) => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(p * sorted.length) - 1))]!;
};

/** Durations of finished runs of one rebuild over time, with rolling p50 and p95 and its time limit. */
export function DurationTrend({ timeline }: { timeline: Timeline }) {
  const finished = timeline.runs.filter(
    (r) => r.startedAt !== null && r.durationMs !== null && r.finishedAt !== null && r.status !== "skipped",
  );
  const rebuilds = [...new Set(finished.map((r) => r.rebuild))].sort();
  const [chosen, setChosen] = useState<string | null>(null);
  const rebuild = chosen && rebuilds.includes(chosen) ? chosen : (rebuilds[0] ?? null);
  if (!rebuild) return <p className="text-sm text-slate-600">No finished runs in this window for a duration trend.</p>;
  const runs = finished.filter((r) => r.rebuild === rebuild).sort((a, b) => a.startedAt! - b.startedAt!);
  const rolling = runs.map((run, i) => {
    const window = runs.slice(Math.max(0, i - ROLLING + 1), i + 1).map((r) => r.durationMs!);
    return { at: run.startedAt!, p50: percentileOf(window, 0.5), p95: percentileOf(window, 0.95) };
  });
  const longest = Math.max(...runs.map((r) => r.durationMs!));
  const limit = timeline.timeLimits[rebuild] ?? null;
  const showLimit = limit !== null && limit <= longest * 3;
  const plotWidth = WIDTH - TREND_MARGIN.left - TREND_MARGIN.right;
  const plotHeight = TREND_HEIGHT - TREND_MARGIN.top - TREND_MARGIN.bottom;
  const x = scaleTime<number>({ domain: [timeline.since, timeline.until], range: [0, plotWidth] });
  const y = scaleLinear<number>({
    domain: [0, Math.max(longest, showLimit ? limit : 0) * 1.1 || 1],
    range: [plotHeight, 0],
    nice: true,
  });
  const overall = runs.map((r) => r.durationMs!);
  return (
    <div className="space-y-2">
      <div className="flex flex-wrap items-center gap-3 text-sm">
        <h3 className="font-semibold">Duration trend</h3>
        <label className="flex items-center gap-1">
          <span className="text-xs text-slate-600">Rebuild</span>
          <select
            className="rounded border border-slate-300 bg-white px-2 py-0.5"
            value={rebuild}
            onChange={(e) => setChosen(e.target.value)}
          >
            {rebuilds.map((r) => (
              <option key={r}>{r}</option>
            ))}
          </select>
        </label>
        <span className="text-xs text-slate-600" data-field="trend-summary">
          {runs.length} runs · p50 {formatDurationMs(percentileOf(overall, 0.5))} · p95{" "}
          {formatDurationMs(percentileOf(overall, 0.95))}
          {limit !== null ? ` · time limit ${formatDurationMs(limit)}` : ""}
        </span>
        <ul className="flex gap-3 text-xs text-slate-600" aria-label="Trend lines">
          <li className="flex items-center gap-1">
            <span aria-hidden className="inline-block h-0.5 w-4 bg-sky-600" /> rolling p50 ({ROLLING} runs)
          </li>
          <li className="flex items-center gap-1">
            <span aria-hidden className="inline-block h-0.5 w-4 bg-amber-500" /> rolling p95
          </li>
          {showLimit ? (
            <li className="flex items-center gap-1">
              <span aria-hidden className="inline-block h-0.5 w-4 bg-red-500" /> time limit
            </li>
          ) : null}
        </ul>
      </div>
      <svg
        viewBox={`0 0 ${WIDTH} ${TREND_HEIGHT}`}
        className="block h-auto w-full"
        role="figure"
        aria-label={`Durations of ${rebuild}: ${runs.length} runs, p50 ${formatDurationMs(percentileOf(overall, 0.5))}, p95 ${formatDurationMs(percentileOf(overall, 0.95))}`}
        data-chart="duration-trend"
        data-rebuild={rebuild}
      >
        <Group left={TREND_MARGIN.left} top={TREND_MARGIN.top}>
          {showLimit ? (
            <line
              data-mark="time-limit"
              x1={0}
              x2={plotWidth}
              y1={y(limit)}
              y2={y(limit)}
              stroke={STATUS_COLOURS.failed}
              strokeDasharray="6 4"
            />
          ) : null}
          <LinePath
            data={rolling}
            x={(d) => x(d.at)}
            y={(d) => y(d.p95)}
            stroke="#f59e0b"
            strokeWidth={2}
            data-mark="p95"
          />
          <LinePath
            data={rolling}
            x={(d) => x(d.at)}
            y={(d) => y(d.p50)}
            stroke="#0284c7"
            strokeWidth={2}
            data-mark="p50"
          />
          {runs.map((run) => (
            <Link key={run.id} href={`/runs/${run.id}`} tabIndex={-1}>
              <circle
                data-mark="run"
                data-run-id={run.id}
                data-status={run.status}
                cx={x(run.startedAt!)}
                cy={y(run.durationMs!)}
                r={3.5}
                fill={STATUS_COLOURS[run.status]}
              >
                <title>{`${run.id}: ${run.status}, ${formatDurationMs(run.durationMs)}, started ${formatAbsolute(run.startedAt, "utc")}`}</title>
              </circle>
            </Link>
          ))}
          <AxisLeft
            scale={y}
            numTicks={5}
            tickFormat={(v) => formatDurationMs(Number(v))}
            stroke="currentColor"
            tickStroke="currentColor"
            tickLabelProps={{ fill: "currentColor", fontSize: 11, textAnchor: "end", dx: -4, dy: "0.32em" }}
          />
          <AxisBottom
            top={plotHeight}
            scale={x}
            numTicks={8}
            tickFormat={tickText(timeline.range)}
            stroke="currentColor"
            tickStroke="currentColor"
            tickLabelProps={{ fill: "currentColor", fontSize: 11, textAnchor: "middle" }}
          />
        </Group>
      </svg>
    </div>
  );
}
