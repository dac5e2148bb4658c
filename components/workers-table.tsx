"use client";

import { useQuery } from "@tanstack/react-query";
import type { WorkerStatus } from "@/lib/workers/heartbeat";
import { workersQuery } from "@/lib/ui/queries";
import { formatAgo, formatDurationMs } from "./format";
import { useNow } from "./use-now";

export function WorkersTable({ initial }: { initial: { workers: WorkerStatus[]; serverTime: number } | null }) {
  const { data, error } = useQuery({
    ...workersQuery(),
    ...(initial ? { initialData: initial } : {}),
  });
  const now = useNow(1_000);
  if (error) return <p className="text-sm text-red-700">Could not load workers: {error.message}</p>;
  if (data && data.workers.length === 0) {
    return (
      <p className="text-sm text-red-800">
        No live worker: queued rebuilds are waiting. Start one with `npm run worker`.
      </p>
    );
  }
  return (
    <div className="overflow-x-auto rounded border border-slate-200 bg-white">
      <table className="min-w-full text-left text-sm" aria-label="Workers">
        <thead className="bg-slate-100 text-xs uppercase text-slate-600">
          <tr>
            <th className="px-3 py-2">Worker</th>
            <th className="px-3 py-2">Host</th>
            <th className="px-3 py-2">PID</th>
            <th className="px-3 py-2">Uptime</th>
            <th className="px-3 py-2">Current job</th>
            <th className="px-3 py-2">Last heartbeat</th>
            <th className="px-3 py-2">Version</th>
          </tr>
        </thead>
        <tbody>
          {(data?.workers ?? []).map((w) => (
            <tr key={w.id} className="border-t border-slate-100" data-worker={w.id}>
              <td className="px-3 py-2 font-mono text-xs">{w.id}</td>
              <td className="px-3 py-2">{w.host}</td>
              <td className="px-3 py-2">{w.pid}</td>
              <td className="px-3 py-2">{formatDurationMs(now - w.startedAt)}</td>
              <td className="px-3 py-2 font-mono text-xs">{w.currentJob ?? "idle"}</td>
              <td className="px-3 py-2">{formatAgo(w.heartbeatAt, now)}</td>
              <td className="px-3 py-2">{w.version}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}
