"use client";

import { AxisBottom } from "@visx/axis";
import { Group } from "@visx/group";
import { scaleLinear } from "@visx/scale";
import type { StepRecord } from "@/lib/runs/types";
import { formatDurationMs } from "@/lib/ui/format";
import { useServerNow } from "./use-now";

const WIDTH = 1000;
const LABEL_WIDTH = 160;
const ROW = 24;
const AXIS = 26;
const STEP_COLOURS: Record<StepRecord["status"], string> = {
  running: "#0ea5e9",
  done: "#10b981",
  failed: "#ef4444",
  aborted: "#f97316",
};

/**
 * A run's steps as a Gantt chart: one row per step from its start to its end (now, while it runs).
 * A step not seen ending stops at `openUntil` when given (its worker went silent, or the run was
 * closed without it): it does not count up as if it were still running.
 */
export function StepsGantt({
  steps,
  runStartedAt,
  openUntil = null,
}: {
  steps: StepRecord[];
  runStartedAt: number | null;
  /** Where a step without an end stops, and why (the chart's "so far" otherwise). */
  openUntil?: { at: number; why: string } | null;
}) {
  const serverNow = useServerNow();
  const now = openUntil ? openUntil.at : serverNow;
  const openNote = openUntil ? ` until ${openUntil.why}, not seen ending` : " so far";
  if (steps.length === 0) return <p className="text-sm text-slate-500">no steps ran</p>;
  const start = Math.min(runStartedAt ?? Infinity, ...steps.map((s) => s.startedAt));
  const end = Math.max(...steps.map((s) => s.finishedAt ?? now), start + 1_000);
  const plotWidth = WIDTH - LABEL_WIDTH - 20;
  const x = scaleLinear<number>({ domain: [0, end - start], range: [0, plotWidth] });
  const height = steps.length * ROW + AXIS;
  return (
    <svg
      viewBox={`0 0 ${WIDTH} ${height}`}
      className="block h-auto w-full max-w-4xl"
      role="img"
      aria-label={`Steps: ${steps.map((s) => `${s.name} ${s.status}`).join(", ")}`}
      data-chart="steps"
    >
      <Group left={LABEL_WIDTH}>
        {steps.map((step, i) => {
          const x1 = x(step.startedAt - start);
          const x2 = Math.max(x1 + 2, x((step.finishedAt ?? now) - start));
          const took = (step.finishedAt ?? now) - step.startedAt;
          return (
            <g key={`${step.name}-${i}`}>
              <text
                x={-8}
                y={i * ROW + ROW / 2}
                dy="0.32em"
                textAnchor="end"
                className="fill-slate-700 font-mono text-[12px]"
              >
                {step.name}
              </text>
              <rect
                data-mark="step"
                data-step={step.name}
                data-status={step.status}
                x={x1}
                y={i * ROW + 4}
                width={x2 - x1}
                height={ROW - 8}
                rx={2}
                fill={STEP_COLOURS[step.status]}
              >
                <title>{`${step.name}: ${step.status}, ${formatDurationMs(took)}${step.finishedAt ? "" : openNote}`}</title>
              </rect>
              <text x={x2 + 6} y={i * ROW + ROW / 2} dy="0.32em" className="fill-slate-600 text-[11px]">
                {step.status} · {formatDurationMs(took)}
                {step.finishedAt || !openUntil ? "" : ` (${openUntil.why})`}
              </text>
            </g>
          );
        })}
        <AxisBottom
          top={steps.length * ROW}
          scale={x}
          numTicks={6}
          tickFormat={(v) => `+${formatDurationMs(Number(v))}`}
          stroke="currentColor"
          tickStroke="currentColor"
          tickLabelProps={{ fill: "currentColor", fontSize: 11, textAnchor: "middle" }}
        />
      </Group>
    </svg>
  );
}
