import type { RunStatus } from "@/lib/runs/types";

/** Skips look neutral, failures red, superseded amber, an operator's cancel violet. */
const STYLES: Record<RunStatus, string> = {
  queued: "bg-slate-100 text-slate-700 ring-slate-300",
  running: "bg-sky-100 text-sky-800 ring-sky-300",
  rebuilt: "bg-emerald-100 text-emerald-800 ring-emerald-300",
  skipped: "bg-slate-100 text-slate-600 ring-slate-300",
  failed: "bg-red-100 text-red-800 ring-red-300",
  aborted: "bg-orange-100 text-orange-800 ring-orange-300",
  superseded: "bg-amber-100 text-amber-800 ring-amber-300",
  deferred: "bg-slate-100 text-slate-600 ring-slate-300",
  cancelled: "bg-violet-100 text-violet-800 ring-violet-300",
};

export const STATUS_COLOURS: Record<RunStatus, string> = {
  queued: "#94a3b8",
  running: "#0ea5e9",
  rebuilt: "#10b981",
  skipped: "#94a3b8",
  failed: "#ef4444",
  aborted: "#f97316",
  superseded: "#f59e0b",
  deferred: "#cbd5e1",
  cancelled: "#8b5cf6",
};

export function StatusBadge({ status }: { status: RunStatus }) {
  return (
    <span
      data-status={status}
      className={`inline-flex items-center rounded px-2 py-0.5 text-xs font-medium ring-1 ring-inset ${STYLES[status]}`}
    >
      {status}
    </span>
  );
}
