"use client";

import { useQuery } from "@tanstack/react-query";
import { useHydrated, useServerFirstQuery } from "./use-now";
import type { RunDetail } from "@/lib/api/runs";
import Link from "next/link";
import { RETRYABLE_STATUSES } from "@/lib/runs/transitions";
import { rebuildHref, runQuery } from "@/lib/ui/queries";
import { CancelJobButton, RetryRunButton } from "./operations";
import { usePollEvery } from "./live-events";
import { formatDurationMs, formatLogLine, formatRunDuration, runDurationNote } from "@/lib/ui/format";
import type { ReactNode } from "react";
import { StepsGantt } from "./steps-gantt";
import { Time } from "./time";
import { StatusBadge } from "./status-badge";

export function RunDetailView({ initial, id }: { initial: RunDetail | null; id: string }) {
  // Live: run and log events re-read it; otherwise poll (faster while it runs).
  const poll = usePollEvery(1);
  // Log times in the viewer's zone once known (UTC until hydration: the same on server and client).
  const zone = useHydrated() ? "local" : "utc";
  const { data: run, error } = useServerFirstQuery(
    useQuery({
      ...runQuery(id),
      ...(poll === false ? { refetchInterval: false } : {}),
      ...(initial ? { initialData: initial } : {}),
    }),
    initial,
  );
  if (!run) return <p className="text-sm text-red-700">{error ? error.message : "Loading…"}</p>;
  const running = run.status === "running" || run.status === "queued";
  const fields: [string, ReactNode][] = [
    [
      "Rebuild",
      <Link key="r" className="text-sky-700 underline" href={rebuildHref(run.rebuild, run.tenant)}>
        {run.rebuild}
        {run.tenant ? ` / ${run.tenant}` : ""}
      </Link>,
    ],
    ["Job", `${run.jobId} (attempt ${run.attempt})`],
    ["Trigger", run.trigger],
    // A running attempt without a version is still reading its inputs to hash them (a large or
    // slow input: its record begins before the version is known).
    ["Version", run.version ?? (run.status === "running" ? "reading inputs…" : null)],
    [
      "Fence",
      run.fence === null ? null : (
        <span key="fence">
          {run.fence}{" "}
          <Link className="text-xs text-sky-700 underline" href={`${rebuildHref(run.rebuild, run.tenant)}#claim-trail`}>
            claim trail
          </Link>
        </span>
      ),
    ],
    [
      "Build hash",
      // Built is not published: a publish refused (its claim lost, a newer fence), or one the
      // output's disk did not record, leaves the hash of a build this run did not make current
      // (black-box helper-182 read it as published).
      run.buildHash === null || run.status === "rebuilt" || run.madeCurrentLater
        ? run.buildHash
        : `${run.buildHash} (built; ${run.status === "running" ? "not published yet" : "this run did not finish its publish"})`,
    ],
    ["Idempotency key", run.idempotencyKey],
    [
      "Worker",
      run.workerId ? (
        <span key="worker">
          {run.workerId} on {run.host}
          {run.workerSilentSince !== null ? (
            <span className="block text-red-800" data-field="worker-silent">
              silent: no heartbeat since <Time at={run.workerSilentSince} /> (paused, dead or cut off from Redis); see
              its claim on the{" "}
              <Link className="underline" href="/claims">
                Claims
              </Link>{" "}
              page
            </span>
          ) : null}
        </span>
      ) : null,
    ],
    ["Queued", <Time key="q" at={run.createdAt} absolute />],
    ["Started", run.startedAt ? <Time key="s" at={run.startedAt} absolute /> : null],
    // A run someone else closed ended unseen: between when it was last seen running and its close.
    run.closedAt && run.finishedAt !== null && run.finishedAt < run.closedAt
      ? [
          "Ended",
          <span key="f" data-field="ended-unseen">
            unseen, after <Time at={run.finishedAt} absolute /> (last seen running) and before{" "}
            <Time at={run.closedAt} absolute /> (closed)
          </span>,
        ]
      : ["Finished", run.finishedAt ? <Time key="f" at={run.finishedAt} absolute /> : null],
    [
      "Duration",
      runDurationNote(run) ? (
        <span key="d" data-field="duration">
          {formatRunDuration(run)} <span className="text-slate-500">({runDurationNote(run)})</span>
        </span>
      ) : (
        formatDurationMs(run.durationMs)
      ),
    ],
    [
      "Made current later",
      run.madeCurrentLater ? (
        <span key="mcl" data-field="made-current-later">
          its build {run.madeCurrentLater.buildHash} (fence {run.madeCurrentLater.fence}), by repair at{" "}
          <Time at={run.madeCurrentLater.at} absolute />: its publish was in the claims Redis, and the disk took its
          fence record later
        </span>
      ) : null,
    ],
    [
      "Force released",
      run.forceRelease ? (
        <span key="fr">
          by {run.forceRelease.actor}: “{run.forceRelease.reason}”{" "}
          <Link
            className="text-sky-700 underline"
            href={`/audit?entry=${encodeURIComponent(run.forceRelease.auditId)}`}
          >
            audit entry {run.forceRelease.auditId}
          </Link>
        </span>
      ) : null,
    ],
    [
      "Next attempt",
      run.nextAttempt ? (
        <span key="na">
          <Link className="text-sky-700 underline" href={`/runs/${encodeURIComponent(run.nextAttempt.id)}`}>
            {run.nextAttempt.id}
          </Link>{" "}
          ({run.nextAttempt.status})
        </span>
      ) : null,
    ],
    [
      "Retried as",
      run.retriedAs ? (
        <span key="ra" data-field="retried-as">
          job{" "}
          <Link className="text-sky-700 underline" href={`/runs?jobId=${encodeURIComponent(run.retriedAs.jobId)}`}>
            {run.retriedAs.jobId}
          </Link>{" "}
          {run.retriedAs.viaRunId ? (
            <>
              (an operator's Retry of run{" "}
              <Link className="text-sky-700 underline" href={`/runs/${encodeURIComponent(run.retriedAs.viaRunId)}`}>
                {run.retriedAs.viaRunId}
              </Link>{" "}
              of this job)
            </>
          ) : (
            "(an operator's Retry of this run)"
          )}
        </span>
      ) : null,
    ],
    [
      "Retry of",
      run.retryOf ? (
        <Link key="rt" className="text-sky-700 underline" href={`/runs/${encodeURIComponent(run.retryOf)}`}>
          {run.retryOf}
        </Link>
      ) : null,
    ],
  ];
  // Only the job's last attempt: one its job went on from is not retried (its next attempt is shown).
  const retryable = (RETRYABLE_STATUSES as readonly string[]).includes(run.status) && !run.nextAttempt;
  return (
    <div className="space-y-4">
      <div className="flex flex-wrap items-start gap-3">
        <StatusBadge status={run.status} />
        {run.reason ? (
          <span className="text-sm text-slate-700" data-field="reason">
            {run.reason}
          </span>
        ) : null}
        {running ? <CancelJobButton jobId={run.jobId} what={`run ${run.id}`} /> : null}
        {retryable ? <RetryRunButton runId={run.id} /> : null}
      </div>
      {running ? (
        <div
          role="progressbar"
          aria-label="Progress"
          aria-valuemin={0}
          aria-valuemax={100}
          aria-valuenow={Math.round(run.progress * 100)}
          className="h-2 w-full max-w-xl overflow-hidden rounded bg-slate-200"
        >
          <div className="h-full bg-sky-600 transition-all" style={{ width: `${Math.round(run.progress * 100)}%` }} />
        </div>
      ) : null}
      <dl className="grid max-w-3xl grid-cols-[10rem_1fr] gap-x-3 gap-y-1 text-sm">
        {fields.map(([label, value]) => (
          <div key={label} className="contents">
            <dt className="text-slate-500">{label}</dt>
            <dd className="font-mono text-xs break-all" data-field={label.toLowerCase().replace(/\s+/g, "-")}>
              {value ?? "–"}
            </dd>
          </div>
        ))}
      </dl>
      <section aria-labelledby="steps-title">
        <h2 id="steps-title" className="font-semibold">
          Steps
        </h2>
        <div className="mt-1">
          <StepsGantt
            steps={run.steps}
            runStartedAt={run.startedAt}
            openUntil={
              running
                ? run.workerSilentSince
                  ? { at: run.workerSilentSince, why: "its worker went silent" }
                  : null
                : run.finishedAt
                  ? { at: run.finishedAt, why: "the run ended" }
                  : null
            }
          />
        </div>
      </section>
      <section aria-labelledby="log-title">
        <h2 id="log-title" className="font-semibold">
          Log {running ? "(live)" : ""}
        </h2>
        <pre
          aria-label="Run log"
          // Scrollable: reachable by keyboard (axe: scrollable-region-focusable).
          tabIndex={0}
          className="mt-1 max-h-96 overflow-auto rounded bg-slate-900 p-3 text-xs text-slate-100"
        >
          {run.log.length ? run.log.map((line) => formatLogLine(line, zone)).join("\n") : "(no output)"}
        </pre>
      </section>
    </div>
  );
}
