"use client";

/**
 * The Runs page's pictures, drawn with visx (scales, axes and shapes as React SVG): every mark is
 * an element with its run's id and status, so it can be hovered, clicked, read by a screen reader
 * and checked by a test. Past a few runs per pixel a lane draws buckets instead of runs (the
 * count in each). Zoomed out (7 d, or a day of many runs) the API sends the timeline counters'
 * buckets instead of runs (lib/api/timeline.ts): each is a bar stacked by outcome, as tall as its
 * count against the lane's busiest bucket, linking to its lane's runs; runs in flight are drawn
 * over them. Marks link for the mouse; they are out of the tab order (the runs table below is
 * the keyboard way).
 */
import { useQuery } from "@tanstack/react-query";
import { AxisBottom, AxisLeft } from "@visx/axis";
import { Group } from "@visx/group";
import { scaleLinear, scaleTime } from "@visx/scale";
import { LinePath } from "@visx/shape";
import Link from "next/link";
import { useState, type ReactNode } from "react";
import type { Timeline } from "@/lib/api/timeline";
import type { TimelineBucket } from "@/lib/runs/buckets";
import { countedBuckets } from "@/lib/runs/counted-lanes";
import type { FinalRunStatus } from "@/lib/runs/transitions";
import type { WindowRun } from "@/lib/runs/window";
import type { RunStatus } from "@/lib/runs/types";
import { formatAbsolute, formatDurationMs } from "@/lib/ui/format";
import { LIVE_POLL_MS, timelineQuery } from "@/lib/ui/queries";
import { usePollEvery } from "./live-events";
import { RunStripLegend } from "./run-strip";
import { STATUS_COLOURS } from "./status-badge";
import { useServerNow } from "./use-now";

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
/** The runs list filtered to a lane (a bucket's way into its runs). */
const laneRunsHref = (lane: Pick<WindowRun, "rebuild" | "tenant">) =>
  `/runs?rebuild=${encodeURIComponent(lane.rebuild)}${lane.tenant ? `&tenant=${encodeURIComponent(lane.tenant)}` : ""}`;
const hoursText = (ms: number | null) => `${(ms ?? 0) / 3_600_000} h`;
/** The counted buckets of view "buckets" (the API sends them columnar), [] in view "runs". */
const bucketsOfTimeline = (timeline: Timeline) =>
  timeline.counted && timeline.bucketMs ? countedBuckets(timeline.counted, timeline.bucketMs) : [];
const bucketTotal = (bucket: TimelineBucket) => Object.values(bucket.counts).reduce((a, b) => a + (b ?? 0), 0);
const tickText = (range: string) => (d: Date | { valueOf(): number }) => {
  const text = formatAbsolute(d.valueOf(), "local");
  return range === "24h" ? text.slice(11, 16) : text.slice(5, 10);
};

type TimeScale = ReturnType<typeof scaleTime<number>>;

/** The time axis under a chart, `top` below its plot's top: 8 ticks, labelled by `tickText`. */
function TimeAxis({ top, scale, range }: { top: number; scale: TimeScale; range: string }) {
  return (
    <AxisBottom
      top={top}
      scale={scale}
      numTicks={8}
      tickFormat={tickText(range)}
      stroke="currentColor"
      tickStroke="currentColor"
      tickLabelProps={{ fill: "currentColor", fontSize: 11, textAnchor: "middle" }}
    />
  );
}

/** `rebuild`: the page's own rebuild filter (the Runs page's `?rebuild=`): the lanes and trends start on it (helper-136). */
export function RunCharts({ rebuild: initialRebuild }: { rebuild?: string } = {}) {
  const [range, setRange] = useState<"24h" | "7d">("24h");
  const [rebuild, setRebuild] = useState<string | null>(initialRebuild ?? null);
  const { data, error } = useQuery({
    ...timelineQuery(range, rebuild),
    refetchInterval: usePollEvery(LIVE_POLL_MS * 5),
  });
  const rebuildNames = data ? Object.keys(data.timeLimits).sort() : [];
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
        <label className="flex min-w-0 max-w-full items-center gap-1 text-sm">
          <span className="text-xs text-slate-600">Lanes</span>
          <select
            className="max-w-full min-w-0 rounded border border-slate-300 bg-white px-2 py-0.5"
            value={rebuild ?? ""}
            onChange={(e) => setRebuild(e.target.value || null)}
          >
            <option value="">every rebuild</option>
            {rebuildNames.map((name) => (
              <option key={name} value={name}>
                {name}
              </option>
            ))}
          </select>
        </label>
        {data ? (
          <span className="text-xs text-slate-600" data-field="timeline-summary" data-view={data.view}>
            {data.total.toLocaleString("en")} {data.total === 1 ? "run" : "runs"}
            {data.view === "buckets"
              ? ` · counted per ${hoursText(data.bucketMs)} per ${data.rebuild ? "tenant" : "rebuild"}`
              : ""}
          </span>
        ) : null}
      </div>
      {error ? <p className="text-sm text-red-700">Could not load the timeline: {error.message}</p> : null}
      <RunStripLegend />
      {data ? <RunsTimeline timeline={data} /> : <p className="text-sm text-slate-600">Loading…</p>}
      {data ? (
        data.view === "buckets" ? (
          <BucketDurationTrend timeline={data} preferred={rebuild} />
        ) : (
          <DurationTrend timeline={data} preferred={rebuild} />
        )
      ) : null}
    </section>
  );
}

export function RunsTimeline({ timeline }: { timeline: Timeline }) {
  const now = useServerNow();
  const buckets = bucketsOfTimeline(timeline);
  const lanes = [...new Set([...timeline.runs.map(laneOf), ...buckets.map(laneOf)])].sort();
  if (lanes.length === 0) return <p className="text-sm text-slate-600">No runs in this window.</p>;
  const plotWidth = WIDTH - LABEL_WIDTH - 10;
  const height = lanes.length * LANE_HEIGHT + AXIS_HEIGHT;
  const x = scaleTime<number>({ domain: [timeline.since, timeline.until], range: [0, plotWidth], clamp: true });
  const byLane = new Map<string, WindowRun[]>(lanes.map((lane) => [lane, []]));
  for (const run of timeline.runs) byLane.get(laneOf(run))!.push(run);
  const bucketsByLane = new Map<string, TimelineBucket[]>(lanes.map((lane) => [lane, []]));
  for (const bucket of buckets) bucketsByLane.get(laneOf(bucket))!.push(bucket);
  const counted = buckets.reduce((sum, b) => sum + bucketTotal(b), 0);
  return (
    <svg
      viewBox={`0 0 ${WIDTH} ${height}`}
      className="block h-auto w-full"
      role="figure"
      aria-label={
        timeline.view === "buckets"
          ? `Runs timeline, last ${timeline.range}: ${counted} finished runs counted per ${hoursText(timeline.bucketMs)}, ${timeline.runs.length} in flight, in ${lanes.length} lanes`
          : `Runs timeline, last ${timeline.range}: ${timeline.runs.length} runs in ${lanes.length} lanes`
      }
      data-chart="timeline"
      data-view={timeline.view}
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
          const laneBuckets = bucketsByLane.get(lane)!;
          const busiest = Math.max(1, ...laneBuckets.map(bucketTotal));
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
              {laneBuckets.map((bucket) => (
                <CountedBucket
                  key={bucket.start}
                  bucket={bucket}
                  x1={x(bucket.start)}
                  x2={x(bucket.start + timeline.bucketMs!)}
                  y={y + 4}
                  height={LANE_HEIGHT - 8}
                  busiest={busiest}
                  bucketMs={timeline.bucketMs!}
                />
              ))}
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
        <TimeAxis top={lanes.length * LANE_HEIGHT} scale={x} range={timeline.range} />
      </Group>
    </svg>
  );
}

/** Outcomes bottom-up in a stacked bucket: failures at the base, where they are seen first. */
const STACK_ORDER = SEVERITY.filter((s): s is FinalRunStatus => s !== "running" && s !== "queued");

/** One counted bucket: a bar stacked by outcome, its height the count against the lane's busiest. */
function CountedBucket(props: {
  bucket: TimelineBucket;
  x1: number;
  x2: number;
  y: number;
  height: number;
  busiest: number;
  bucketMs: number;
}) {
  const { bucket, x1, x2, y, height, busiest, bucketMs } = props;
  const total = bucketTotal(bucket);
  const tall = Math.max(2, (height * total) / busiest);
  const width = Math.max(1, x2 - x1 - 1);
  const present = STACK_ORDER.filter((status) => bucket.counts[status]);
  const heights = present.map((status) => (tall * bucket.counts[status]!) / total);
  const segments = present.map((status, i) => ({
    status,
    h: heights[i]!,
    y: y + height - heights.slice(0, i + 1).reduce((a, b) => a + b, 0),
  }));
  const detail = STACK_ORDER.filter((status) => bucket.counts[status])
    .map((status) => {
      const n = bucket.counts[status]!;
      const summed = bucket.durationMs[status];
      return `${n} ${status}${summed && status !== "skipped" ? ` (mean ${formatDurationMs(summed / n)})` : ""}`;
    })
    .join(", ");
  return (
    <Link href={laneRunsHref(bucket)} tabIndex={-1}>
      <g
        data-mark="bucket"
        data-count={total}
        data-start={bucket.start}
        data-status={SEVERITY.find((s) => bucket.counts[s as FinalRunStatus]) ?? "rebuilt"}
      >
        <title>{`${laneOf(bucket)}, ${formatAbsolute(bucket.start, "utc")} + ${hoursText(bucketMs)}: ${total} runs — ${detail}`}</title>
        <rect x={x1} y={y} width={width} height={height} fill="transparent" />
        {segments.map((segment) => (
          <rect
            key={segment.status}
            data-segment={segment.status}
            data-count={bucket.counts[segment.status]}
            x={x1}
            y={segment.y}
            width={width}
            height={segment.h}
            fill={STATUS_COLOURS[segment.status]}
          />
        ))}
      </g>
    </Link>
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

type Scale = (value: number | Date) => number;

/**
 * What both duration trends share: the rebuild picker and summary above, and an SVG with the
 * rebuild's time limit (dashed, when it is within 3× the longest duration), both axes and the
 * trend's own marks (`children`, given the scales).
 */
function TrendFrame(props: {
  timeline: Timeline;
  rebuilds: string[];
  rebuild: string;
  onChoose: (rebuild: string) => void;
  /** The longest duration drawn (ms): the y axis reaches it, and the limit when it is near. */
  longest: number;
  summary: ReactNode;
  legend?: (showLimit: boolean) => ReactNode;
  ariaLabel: string;
  view?: string;
  children: (scales: { x: Scale; y: Scale }) => ReactNode;
}) {
  const { timeline, rebuild, longest } = props;
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
  return (
    <div className="space-y-2">
      <div className="flex flex-wrap items-center gap-3 text-sm">
        <h3 className="font-semibold">Duration trend</h3>
        <label className="flex min-w-0 max-w-full items-center gap-1">
          <span className="text-xs text-slate-600">Rebuild</span>
          <select
            className="max-w-full min-w-0 rounded border border-slate-300 bg-white px-2 py-0.5"
            value={rebuild}
            onChange={(e) => props.onChoose(e.target.value)}
          >
            {props.rebuilds.map((r) => (
              <option key={r}>{r}</option>
            ))}
          </select>
        </label>
        <span className="text-xs text-slate-600" data-field="trend-summary">
          {props.summary}
          {limit !== null ? ` · time limit ${formatDurationMs(limit)}` : ""}
        </span>
        {props.legend?.(showLimit)}
      </div>
      <svg
        viewBox={`0 0 ${WIDTH} ${TREND_HEIGHT}`}
        className="block h-auto w-full"
        role="figure"
        aria-label={props.ariaLabel}
        data-chart="duration-trend"
        data-rebuild={rebuild}
        data-view={props.view}
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
          {props.children({ x, y })}
          <AxisLeft
            scale={y}
            numTicks={5}
            tickFormat={(v) => formatDurationMs(Number(v))}
            stroke="currentColor"
            tickStroke="currentColor"
            tickLabelProps={{ fill: "currentColor", fontSize: 11, textAnchor: "end", dx: -4, dy: "0.32em" }}
          />
          <TimeAxis top={plotHeight} scale={x} range={timeline.range} />
        </Group>
      </svg>
    </div>
  );
}

/** The first of `candidates` that is one of `rebuilds` (a trend's chosen, the page's, the first), or null. */
const firstOf = (candidates: (string | null)[], rebuilds: readonly string[]) =>
  candidates.find((c): c is string => c !== null && rebuilds.includes(c)) ?? null;

/** Durations of finished runs of one rebuild over time, with rolling p50 and p95 and its time limit. */
export function DurationTrend({ timeline, preferred = null }: { timeline: Timeline; preferred?: string | null }) {
  const finished = timeline.runs.filter(
    (r) => r.startedAt !== null && r.durationMs !== null && r.finishedAt !== null && r.status !== "skipped",
  );
  const rebuilds = [...new Set(finished.map((r) => r.rebuild))].sort();
  const [chosen, setChosen] = useState<string | null>(null);
  const rebuild = firstOf([chosen, preferred, rebuilds[0] ?? null], rebuilds);
  if (!rebuild) return <p className="text-sm text-slate-600">No finished runs in this window for a duration trend.</p>;
  const runs = finished.filter((r) => r.rebuild === rebuild).sort((a, b) => a.startedAt! - b.startedAt!);
  const rolling = runs.map((run, i) => {
    const window = runs.slice(Math.max(0, i - ROLLING + 1), i + 1).map((r) => r.durationMs!);
    return { at: run.startedAt!, p50: percentileOf(window, 0.5), p95: percentileOf(window, 0.95) };
  });
  const overall = runs.map((r) => r.durationMs!);
  const p50 = formatDurationMs(percentileOf(overall, 0.5));
  const p95 = formatDurationMs(percentileOf(overall, 0.95));
  return (
    <TrendFrame
      timeline={timeline}
      rebuilds={rebuilds}
      rebuild={rebuild}
      onChoose={setChosen}
      longest={Math.max(...overall)}
      summary={`${runs.length} ${runs.length === 1 ? "run" : "runs"} · p50 ${p50} · p95 ${p95}`}
      legend={(showLimit) => (
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
      )}
      ariaLabel={`Durations of ${rebuild}: ${runs.length} runs, p50 ${p50}, p95 ${p95}`}
    >
      {({ x, y }) => (
        <>
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
        </>
      )}
    </TrendFrame>
  );
}

/**
 * Zoomed out (view "buckets"): each bucket's mean duration of one rebuild's finished runs (skips
 * left out, as in the per-run trend), from the counters' summed durations — no run is read.
 */
export function BucketDurationTrend({ timeline, preferred = null }: { timeline: Timeline; preferred?: string | null }) {
  const [chosen, setChosen] = useState<string | null>(null);
  const means = new Map<string, Map<number, { runs: number; summed: number }>>();
  for (const bucket of bucketsOfTimeline(timeline)) {
    let runs = 0;
    let summed = 0;
    for (const status of STACK_ORDER) {
      if (status === "skipped") continue;
      runs += bucket.counts[status] ?? 0;
      summed += bucket.durationMs[status] ?? 0;
    }
    if (runs === 0) continue;
    const perStart = means.get(bucket.rebuild) ?? new Map<number, { runs: number; summed: number }>();
    const at = perStart.get(bucket.start) ?? { runs: 0, summed: 0 };
    perStart.set(bucket.start, { runs: at.runs + runs, summed: at.summed + summed });
    means.set(bucket.rebuild, perStart);
  }
  const rebuilds = [...means.keys()].sort();
  const rebuild = firstOf([chosen, preferred, rebuilds[0] ?? null], rebuilds);
  if (!rebuild) return <p className="text-sm text-slate-600">No finished runs in this window for a duration trend.</p>;
  const points = [...means.get(rebuild)!]
    .map(([start, { runs, summed }]) => ({ start, runs, mean: summed / runs }))
    .sort((a, b) => a.start - b.start);
  const bucketMs = timeline.bucketMs ?? 3_600_000;
  const runs = points.reduce((sum, p) => sum + p.runs, 0);
  return (
    <TrendFrame
      timeline={timeline}
      rebuilds={rebuilds}
      rebuild={rebuild}
      onChoose={setChosen}
      longest={Math.max(...points.map((p) => p.mean))}
      summary={`${runs} ${runs === 1 ? "run" : "runs"} · mean per ${hoursText(bucketMs)}`}
      ariaLabel={`Mean durations of ${rebuild} per ${hoursText(bucketMs)}: ${runs} runs`}
      view="buckets"
    >
      {({ x, y }) => (
        <>
          <LinePath
            data={points}
            x={(d) => x(d.start + bucketMs / 2)}
            y={(d) => y(d.mean)}
            stroke="#0284c7"
            strokeWidth={2}
            data-mark="mean"
          />
          {points.map((p) => (
            <circle
              key={p.start}
              data-mark="bucket-mean"
              data-count={p.runs}
              cx={x(p.start + bucketMs / 2)}
              cy={y(p.mean)}
              r={3}
              fill="#0284c7"
            >
              <title>{`${rebuild}, ${formatAbsolute(p.start, "utc")} + ${hoursText(bucketMs)}: ${p.runs} runs, mean ${formatDurationMs(p.mean)}`}</title>
            </circle>
          ))}
        </>
      )}
    </TrendFrame>
  );
}
