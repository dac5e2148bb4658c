import type { ApiRebuild } from "@/lib/api/rebuilds";
import { STATUS_COLOURS } from "./status-badge";

/** The last runs as bars: height = duration, colour = status. */
export function Sparkline({ runs }: { runs: ApiRebuild["recentRuns"] }) {
  if (runs.length === 0) return <span className="text-xs text-slate-400">no runs yet</span>;
  const width = 120;
  const height = 24;
  const bar = width / 30;
  const longest = Math.max(1, ...runs.map((r) => r.durationMs ?? 0));
  return (
    <svg width={width} height={height} role="img" aria-label={`last ${runs.length} runs`} className="block">
      {runs.map((run, i) => {
        const h = Math.max(2, ((run.durationMs ?? 0) / longest) * (height - 2));
        return (
          <rect key={run.id} x={i * bar} y={height - h} width={bar - 1} height={h} fill={STATUS_COLOURS[run.status]}>
            <title>{`${run.id}: ${run.status}${run.durationMs !== null ? `, ${Math.round(run.durationMs / 100) / 10} s` : ""}`}</title>
          </rect>
        );
      })}
    </svg>
  );
}
