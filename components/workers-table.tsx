"use client";

import { useQuery } from "@tanstack/react-query";
import type { SilentWorker, WorkerStatus } from "@/lib/workers/heartbeat";
import { HEARTBEAT_EVERY_MS } from "@/lib/workers/beat-timing";
import { LIVE_POLL_MS, workersQuery } from "@/lib/ui/queries";
import { usePollEvery } from "./live-events";
import { DataTable } from "./data-table";
import { NotReadYet } from "./not-read-yet";
import { formatDurationMs } from "@/lib/ui/format";
import { Time } from "./time";
import { useRenderTime, useServerFirst, useServerNow } from "./use-now";

export function WorkersTable({
  initial,
  readError = null,
}: {
  initial: { workers: WorkerStatus[]; silent: SilentWorker[]; serverTime: number } | null;
  /** Why the server could not read the workers for the page, or null. */
  readError?: string | null;
}) {
  const renderTime = useRenderTime();
  // Heartbeats (and the job each names) are not live events: while live the page still re-reads
  // them at the beat's period, or an open tab shows every worker's last beat growing old (black-box
  // helper-182: "2 min 1 s ago" for workers beating every 5 s).
  const { data: live, error } = useQuery({
    ...workersQuery(),
    refetchInterval: usePollEvery(LIVE_POLL_MS) || HEARTBEAT_EVERY_MS,
    ...(initial ? { initialData: initial, initialDataUpdatedAt: renderTime } : {}),
  });
  const data = useServerFirst(live, initial);
  const now = useServerNow();
  if (error) return <p className="text-sm text-red-700">Could not load workers: {error.message}</p>;
  if (!data) return <NotReadYet what="the workers" serverError={readError} field="workers-reading" />;
  const silent = data ? <SilentWorkers silent={data.silent ?? []} /> : null;
  if (data && data.workers.length === 0) {
    return (
      <div className="space-y-3">
        <p className="text-sm text-red-800">
          No live worker: queued rebuilds are waiting. Start one with `npm run worker`.
        </p>
        {silent}
      </div>
    );
  }
  return (
    <div className="space-y-3">
      <DataTable
        label="Workers"
        columns={["Worker", "Host", "PID", "Uptime", "Current job", "Last heartbeat", "Version", "Step containment"]}
      >
        {(data?.workers ?? []).map((w) => (
          <tr key={w.id} className="border-t border-slate-100" data-worker={w.id}>
            <td className="px-3 py-2 font-mono text-xs">{w.id}</td>
            <td className="px-3 py-2">{w.host}</td>
            <td className="px-3 py-2">{w.pid}</td>
            <td className="px-3 py-2" title={`up since ${new Date(w.startedAt).toISOString()}`}>
              {formatDurationMs(Math.max(0, now - w.startedAt))}
            </td>
            <td className="px-3 py-2 font-mono text-xs">{w.currentJob ?? "idle"}</td>
            <td className="px-3 py-2">
              <Time at={w.heartbeatAt} />
              {w.upkeepRunningMs != null ? (
                <span
                  className="ml-2 rounded bg-amber-100 px-1.5 py-0.5 text-amber-900"
                  data-upkeep-held
                  title="Its upkeep after a heartbeat (closing dead workers' runs, repairing current, trimming, pruning) is held up: a hung disk or an unanswered Redis command? Nothing of it runs until it ends."
                >
                  upkeep running for {formatDurationMs(w.upkeepRunningMs)}
                </span>
              ) : null}
            </td>
            <td className="px-3 py-2">{w.version}</td>
            <td className="px-3 py-2" data-containment={w.containment}>
              <ContainmentBadge mode={w.containment} />
              {w.limitedStepsContainment === "process-group" && w.containment !== "process-group" ? (
                <>
                  {"; limited steps: "}
                  <ContainmentBadge mode="process-group" />
                </>
              ) : null}
              {w.publishedBuilds === "writable" ? (
                <>
                  {"; "}
                  <span
                    className="rounded bg-amber-100 px-1.5 py-0.5 text-amber-900"
                    data-published-builds="writable"
                    title="This worker runs steps as root and cannot give them a read-only view of published builds (no mount namespace there): a step could change a published build"
                  >
                    builds writable by root steps
                  </span>
                </>
              ) : w.publishedBuilds === "read-only" ? (
                <span
                  className="text-slate-500"
                  data-published-builds="read-only"
                  title="Runs steps as root, each in a mount namespace where its output's published builds are read-only"
                >
                  ; builds read-only to steps
                </span>
              ) : null}
            </td>
          </tr>
        ))}
      </DataTable>
      {silent}
    </div>
  );
}

/**
 * Workers that stopped beating in the last hour without shutting down (a clean stop retires a
 * worker): paused, killed or cut off from Redis. Their claims turn stale; a live worker closes
 * their runs once their heartbeat has expired.
 */
function SilentWorkers({ silent }: { silent: SilentWorker[] }) {
  if (silent.length === 0) return null;
  return (
    <div className="space-y-1" data-field="silent-workers">
      <h2 className="text-sm font-semibold text-amber-900">Stopped beating without shutting down (last hour)</h2>
      <p className="text-xs text-slate-600">
        Paused (SIGSTOP, a frozen container), killed, or cut off from Redis: their claims turn stale, and a live worker
        closes their runs. One that comes back appears above again.
      </p>
      <ul className="text-sm">
        {silent.map((w) => (
          <li key={w.id} data-silent-worker={w.id}>
            <span className="font-mono text-xs">{w.id}</span> · last heartbeat <Time at={w.lastBeatAt} />
          </li>
        ))}
      </ul>
    </div>
  );
}

/** What the worker enforces on its steps' processes (lib/rebuilds/steps/containment.ts). */
function ContainmentBadge({ mode }: { mode: WorkerStatus["containment"] }) {
  if (mode === "cgroup") return <span title="Nothing a step starts outlives it">cgroup per step</span>;
  if (mode === "pid-namespace") return <span title="Nothing a step starts outlives it">PID namespace</span>;
  const text = mode === "process-group" ? "process group only" : "unknown (older worker)";
  return (
    <span
      className="rounded bg-amber-100 px-1.5 py-0.5 text-amber-900"
      title="A step's setsid or double-forked daemon can outlive it on this worker"
    >
      {text}
    </span>
  );
}
