"use client";

import { useQuery } from "@tanstack/react-query";
import { useServerFirstQuery } from "./use-now";
import { useState } from "react";
import Link from "next/link";
import type { QueueEntry, QueueView } from "@/lib/operations/queue-view";
import { formatDurationMs } from "@/lib/ui/format";
import { LIVE_POLL_MS, queueQuery, rebuildHref, type QueueFilter } from "@/lib/ui/queries";
import { DataTable } from "./data-table";
import { NotReadYet } from "./not-read-yet";
import { CancelJobButton } from "./operations";
import { StatusBadge } from "./status-badge";
import { Time } from "./time";

const STATE_STYLE: Record<QueueEntry["state"], string> = {
  active: "bg-sky-100 text-sky-800 ring-sky-300",
  waiting: "bg-slate-100 text-slate-700 ring-slate-300",
  prioritized: "bg-slate-100 text-slate-700 ring-slate-300",
  delayed: "bg-amber-50 text-amber-800 ring-amber-300",
  failed: "bg-red-100 text-red-800 ring-red-300",
  cancelled: "bg-violet-50 text-violet-800 ring-violet-300",
};

/**
 * The queue: what runs, what waits (and until when, and why), what failed lately. It polls even
 * while the live stream is up: job moves in BullMQ are not on the stream.
 */
export function QueueTable({
  filter,
  initial,
  showRebuild = true,
}: {
  filter: QueueFilter;
  initial?: QueueView | null;
  showRebuild?: boolean;
}) {
  const { data, error } = useServerFirstQuery(
    useQuery({
      ...queueQuery(filter),
      refetchInterval: LIVE_POLL_MS,
      ...(initial ? { initialData: initial } : {}),
    }),
    initial,
  );
  // What the last cancel from this table came to: its row may be gone with the change.
  const [notice, setNotice] = useState<{ jobId: string; text: React.ReactNode } | null>(null);
  const columns = [
    "Job",
    ...(showRebuild ? ["Rebuild"] : []),
    "State",
    "When / why",
    "Attempts",
    "Last run",
    { hidden: "Actions" },
  ];
  return (
    <div className="space-y-2">
      {error ? <p className="text-sm text-red-700">Could not load the queue: {error.message}</p> : null}
      {!data && !error ? <NotReadYet what="the queue" field="queue-reading" /> : null}
      {notice ? (
        <p role="status" className="text-sm text-slate-700" data-field="queue-notice">
          Job {notice.jobId}: {notice.text}
        </p>
      ) : null}
      {data ? (
        <p className="text-xs text-slate-600" data-field="queue-counts">
          Whole queue: {data.counts.active} active, {data.counts.waiting + data.counts.prioritized} waiting,{" "}
          {data.counts.delayed} delayed, {data.counts.failed} failed or cancelled (kept)
        </p>
      ) : null}
      <DataTable
        label="Queue"
        columns={columns}
        footer={data && data.jobs.length === 0 ? <p className="p-3 text-sm text-slate-600">Nothing queued.</p> : null}
      >
        {(data?.jobs ?? []).map((job) => (
          <tr
            key={`${job.state}:${job.jobId}`}
            className="border-t border-slate-100 align-top"
            data-job={job.jobId}
            data-state={job.state}
          >
            <td className="px-3 py-2 font-mono text-xs break-all">
              <Link className="text-sky-700 underline" href={`/runs?jobId=${encodeURIComponent(job.jobId)}`}>
                {job.jobId}
              </Link>
              <div className="font-sans text-slate-500">
                {job.trigger ?? "?"}
                {job.requestedBy ? ` by ${job.requestedBy}` : ""}
                {job.force ? " · forced" : ""}
                {job.version ? ` · version ${job.version}` : ""}
              </div>
              {job.retryOf ? (
                <div className="font-sans text-slate-500">
                  retry of{" "}
                  <Link className="underline" href={`/runs/${encodeURIComponent(job.retryOf)}`}>
                    {job.retryOf}
                  </Link>
                </div>
              ) : null}
            </td>
            {showRebuild ? (
              <td className="px-3 py-2">
                {job.rebuild ? (
                  <Link className="text-sky-700 underline" href={rebuildHref(job.rebuild, job.tenant)}>
                    {job.rebuild}
                    {job.tenant ? ` / ${job.tenant}` : ""}
                  </Link>
                ) : (
                  "?"
                )}
              </td>
            ) : null}
            <td className="px-3 py-2">
              <span
                className={`inline-flex rounded px-2 py-0.5 text-xs font-medium ring-1 ring-inset ${STATE_STYLE[job.state]}`}
              >
                {job.state}
              </span>
              {job.cancelRequested ? (
                <div className="mt-1 text-xs text-violet-800" data-field="cancel-requested">
                  cancel requested by {job.cancelRequested.actor}
                </div>
              ) : null}
            </td>
            <td className="max-w-sm px-3 py-2 text-xs" data-field="why">
              <WhenWhy job={job} serverTime={data!.serverTime} />
            </td>
            <td className="px-3 py-2 text-xs">
              {job.state === "cancelled" ? "cancelled: not retried" : `${job.attemptsMade} failed of ${job.attempts}`}
              <div className="text-slate-500">{job.attemptsStarted} started</div>
            </td>
            <td className="px-3 py-2 text-xs">
              {job.lastRun ? (
                <>
                  <StatusBadge status={job.lastRun.status} />
                  <div>
                    <Link className="font-mono text-sky-700 underline" href={`/runs/${job.lastRun.id}`}>
                      {job.lastRun.id}
                    </Link>
                  </div>
                </>
              ) : (
                <span className="text-slate-500">none yet</span>
              )}
            </td>
            <td className="px-3 py-2">
              {job.state === "failed" || job.state === "cancelled" ? null : job.waitReason?.kind ===
                "scheduled-tick" ? (
                // A tick is not cancelled (the schedule makes the next one): it is paused.
                job.rebuild ? (
                  <Link
                    className="text-xs text-sky-700 underline"
                    href={`${rebuildHref(job.rebuild, job.tenant)}#${job.tenant ? `schedule-${job.tenant}` : "schedule"}`}
                    title="A schedule's next tick cannot be cancelled: pause the schedule on its rebuild's page"
                  >
                    pause schedule
                  </Link>
                ) : null
              ) : (
                <CancelJobButton
                  jobId={job.jobId}
                  what={`job ${job.jobId}`}
                  onOutcome={(text) => setNotice({ jobId: job.jobId, text })}
                />
              )}
            </td>
          </tr>
        ))}
      </DataTable>
    </div>
  );
}

function WhenWhy({ job, serverTime }: { job: QueueEntry; serverTime: number }) {
  if (job.state === "failed" || job.state === "cancelled") {
    return (
      <>
        <div className={job.state === "cancelled" ? "text-violet-800" : "text-red-800"}>
          {job.failedReason ?? "failed"}
        </div>
        {job.finishedAt ? <Time at={job.finishedAt} /> : null}
      </>
    );
  }
  if (job.state === "active") return <span>running since {job.lastRun ? "its run began" : "it was picked up"}</span>;
  return (
    <>
      {job.nextAttemptAt ? (
        <div data-field="next-attempt">
          next attempt <Time at={job.nextAttemptAt} zone="utc" absolute />{" "}
          {job.nextAttemptAt < serverTime - 1_000 ? (
            // Past it and still waiting: no worker has picked it up (none running, or all busy).
            <span className="text-amber-800">(overdue by {formatDurationMs(serverTime - job.nextAttemptAt)})</span>
          ) : (
            <>(in {formatDurationMs(Math.max(0, job.nextAttemptAt - serverTime))})</>
          )}
        </div>
      ) : null}
      {job.waitReason ? (
        <div>
          <span className="font-medium" data-field="wait-kind">
            {job.waitReason.kind === "deferred"
              ? "deferred"
              : job.waitReason.kind === "backoff"
                ? "backoff"
                : job.waitReason.kind === "scheduled-tick"
                  ? "scheduled"
                  : "queued"}
          </span>
          : {job.waitReason.detail}
        </div>
      ) : null}
    </>
  );
}
