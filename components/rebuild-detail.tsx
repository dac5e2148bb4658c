"use client";

import { useQuery } from "@tanstack/react-query";
import { useServerFirstQuery } from "./use-now";
import { TtlLeft } from "./ttl-left";
import Link from "next/link";
import { useId, useRef, useState } from "react";
import type { ApiRebuild, ApiRebuildDetail } from "@/lib/api/rebuilds";
import { formatDurationMs, formatRunDuration, runDurationNote, SKIPS_TITLE } from "@/lib/ui/format";
import { releasingText } from "@/lib/ui/release-notice";
import { LIVE_POLL_MS, rebuildDetailQuery, rebuildHref } from "@/lib/ui/queries";
import { ClaimTrail } from "./claim-trail";
import { usePollEvery } from "./live-events";
import { ScheduleToggle } from "./operations";
import { QueueTable } from "./queue-table";
import { RebuildNowForm } from "./rebuilds-table";
import { useCanOperate } from "./role";
import { RunStrip } from "./run-strip";
import { RunsTable } from "./runs-table";
import { StatusBadge } from "./status-badge";
import { Time } from "./time";

/**
 * A rebuild's page (`/rebuilds/<name>[/<tenant>]`): what it is, and per tenant its schedule
 * (pause/resume), claim, last run and Rebuild now; then its queue and its runs.
 */
export function RebuildDetailView({
  name,
  tenant,
  initial,
}: {
  name: string;
  tenant: string | null;
  initial: ApiRebuildDetail | null;
}) {
  const query = useQuery({
    ...rebuildDetailQuery(name, tenant),
    refetchInterval: usePollEvery(LIVE_POLL_MS),
    ...(initial ? { initialData: initial } : {}),
  });
  const { data, error } = useServerFirstQuery(query, initial);
  if (!data) return <p className="text-sm text-red-700">{error ? error.message : "Loading…"}</p>;
  const { definition, entries } = data;
  const filter = { rebuild: name, ...(tenant ? { tenant } : {}) };
  return (
    <div className="space-y-6">
      {error ? <p className="text-sm text-red-700">Could not refresh: {error.message}</p> : null}
      <section aria-labelledby="definition-title" className="rounded border border-slate-200 bg-white p-3">
        <h2 id="definition-title" className="font-semibold">
          Definition
        </h2>
        <dl className="mt-2 grid grid-cols-[7rem_minmax(0,1fr)] sm:grid-cols-[9rem_minmax(0,1fr)] gap-x-3 gap-y-1 text-sm">
          <dt className="text-slate-500">Output</dt>
          <dd className="font-mono text-xs break-all" data-field="output">
            {definition.output} <span className="text-slate-500">({definition.outputPath})</span>
          </dd>
          <dt className="text-slate-500">Schedule</dt>
          <dd data-field="schedule">
            {definition.schedule ? (
              <span className="font-mono text-xs">
                {definition.schedule.cron} ({definition.schedule.tz})
              </span>
            ) : (
              "on demand"
            )}
          </dd>
          <dt className="text-slate-500">Claim</dt>
          <dd data-field="claim-timing">
            TTL {formatDurationMs(definition.claim.ttlMs)}, refreshed every{" "}
            {formatDurationMs(definition.claim.refreshEveryMs)}
          </dd>
          <dt className="text-slate-500">Limits</dt>
          <dd data-field="limits">
            time limit {formatDurationMs(definition.timeLimitMs)}; {definition.retries.attempts} attempt(s), backoff{" "}
            {formatDurationMs(definition.retries.backoffMs)} up to {formatDurationMs(definition.retries.maxBackoffMs)};
            already-rebuilt for {formatDurationMs(definition.idempotencyTtlMs)}
          </dd>
          {definition.inputs.length ? (
            <>
              <dt className="text-slate-500">Inputs</dt>
              <dd className="font-mono text-xs break-all">{definition.inputs.join(", ")}</dd>
            </>
          ) : null}
          {definition.tenants ? (
            <>
              <dt className="text-slate-500">Tenants</dt>
              <dd className="flex flex-wrap gap-2">
                {definition.tenants.map((t) => (
                  <Link
                    key={t}
                    href={rebuildHref(name, t)}
                    aria-current={t === tenant ? "page" : undefined}
                    className="text-sky-700 underline"
                  >
                    {t}
                  </Link>
                ))}
                {tenant ? (
                  <Link href={rebuildHref(name)} className="text-slate-600 underline">
                    all tenants
                  </Link>
                ) : null}
              </dd>
            </>
          ) : null}
          <dt className="text-slate-500">Steps</dt>
          <dd>
            <ol className="list-decimal pl-5 text-xs" aria-label="Steps">
              {definition.steps.map((step) => (
                <li key={step.name}>
                  <span className="font-medium">{step.name}</span> ({step.kind}):{" "}
                  <span className="font-mono break-all">{step.detail}</span>
                  {step.killGraceMs !== null ? ` · killGrace ${formatDurationMs(step.killGraceMs)}` : ""}
                  {step.limits.memory ? ` · memory ≤ ${Math.round(step.limits.memory / 1_048_576)} MiB` : ""}
                  {step.limits.pids ? ` · ≤ ${step.limits.pids} processes` : ""}
                </li>
              ))}
            </ol>
          </dd>
        </dl>
      </section>

      <section aria-labelledby="state-title" className="space-y-3">
        <h2 id="state-title" className="font-semibold">
          Now
        </h2>
        {entries.map((entry) => (
          <EntryCard
            key={entry.tenant ?? ""}
            entry={entry}
            linkTenant={!tenant && entry.tenant !== null}
            readAt={query.dataUpdatedAt}
          />
        ))}
        {data.entriesTotal > entries.length ? (
          <p className="text-sm text-slate-600" data-field="tenants-shown">
            The first {entries.length} of {data.entriesTotal} tenants.{" "}
            <Link className="text-sky-700 underline" href={`/rebuilds?q=${encodeURIComponent(`${name}/`)}`}>
              Find a tenant on Rebuilds
            </Link>
          </p>
        ) : null}
      </section>

      <section id="claim-trail" aria-labelledby="trail-title" className="space-y-2">
        <h2 id="trail-title" className="font-semibold">
          Claim trail
        </h2>
        <p className="text-xs text-slate-600">
          What happened to the output&apos;s claim: who held it, late refreshes, releases, force releases, takeovers and
          claims that expired without release (with their last holder). Newest first.
        </p>
        {entries.map((entry) => (
          <div key={entry.tenant ?? ""} className="space-y-1">
            {entries.length > 1 ? <h3 className="text-sm font-medium">{entry.tenant}</h3> : null}
            <ClaimTrail name={entry.claimName} label={`${entry.name}${entry.tenant ? ` / ${entry.tenant}` : ""}`} />
          </div>
        ))}
      </section>

      <section aria-labelledby="queue-title" className="space-y-2">
        <h2 id="queue-title" className="font-semibold">
          Queue
        </h2>
        <QueueTable filter={filter} showRebuild={Boolean(definition.tenants && !tenant)} />
      </section>

      <section aria-labelledby="runs-title" className="space-y-2">
        <h2 id="runs-title" className="font-semibold">
          Runs
        </h2>
        <RunsTable
          initial={null}
          initialFilter={filter}
          rebuilds={[{ name: definition.name, tenants: definition.tenants }]}
        />
      </section>
    </div>
  );
}

function EntryCard({
  entry,
  linkTenant,
  readAt,
}: {
  entry: ApiRebuild;
  linkTenant: boolean;
  /** When the page received `entry` (browser ms): its claim's TTL counts down from then. */
  readAt: number;
}) {
  const canOperate = useCanOperate();
  const [open, setOpen] = useState(false);
  const panelId = useId();
  const toggle = useRef<HTMLButtonElement>(null);
  const label = `${entry.name}${entry.tenant ? ` / ${entry.tenant}` : ""}`;
  const paused = entry.schedule?.paused ?? null;
  return (
    <div
      className="space-y-2 rounded border border-slate-200 bg-white p-3"
      data-entry={entry.tenant ?? ""}
      aria-label={`State of ${label}`}
      role="group"
    >
      <div className="flex flex-wrap items-center gap-3">
        <h3 className="font-medium">
          {linkTenant ? (
            <Link className="text-sky-700 underline" href={rebuildHref(entry.name, entry.tenant)}>
              {label}
            </Link>
          ) : (
            label
          )}
        </h3>
        {canOperate ? (
          <button
            type="button"
            ref={toggle}
            aria-expanded={open}
            aria-controls={open ? panelId : undefined}
            aria-label={`Rebuild now: ${label}`}
            onClick={() => setOpen(!open)}
            className="rounded bg-slate-900 px-2 py-1 text-xs font-medium text-white"
          >
            Rebuild now
          </button>
        ) : null}
      </div>
      <dl className="grid grid-cols-[7rem_minmax(0,1fr)] sm:grid-cols-[9rem_minmax(0,1fr)] gap-x-3 gap-y-1 text-sm">
        <dt className="text-slate-500">Schedule</dt>
        <dd
          id={entry.tenant ? `schedule-${entry.tenant}` : "schedule"}
          data-field="schedule-state"
          className="flex flex-wrap items-start gap-2"
        >
          {entry.schedule ? (
            <>
              {paused ? (
                <span
                  className="rounded bg-amber-100 px-2 py-0.5 text-xs font-medium text-amber-900"
                  data-field="paused"
                  title={`paused by ${paused.actor}: ${paused.reason}`}
                >
                  paused by {paused.actor} <Time at={paused.at} />: {paused.reason}
                </span>
              ) : (
                <span className="text-xs">
                  next <Time at={Date.parse(entry.schedule.nextRunAt)} zone="utc" absolute />
                </span>
              )}
              <ScheduleToggle rebuild={entry.name} tenant={entry.tenant} paused={Boolean(paused)} />
            </>
          ) : (
            <span className="text-slate-500">on demand</span>
          )}
        </dd>
        <dt className="text-slate-500">Claim</dt>
        <dd data-field="claim" className="text-xs">
          {entry.claim ? (
            <>
              held by {entry.claim.holder.workerId ?? entry.claim.holder.host} for version {entry.claim.version ?? "?"}{" "}
              {entry.claim.revoked ? (
                <span className="text-amber-900" data-state="releasing">
                  (fence {entry.claim.fence}) · {releasingText(entry.claim)}
                </span>
              ) : (
                <>
                  (fence {entry.claim.fence}, <TtlLeft pttlMs={entry.claim.pttlMs} readAt={readAt} /> left
                  {entry.claim.stale ? `, stale: ${entry.claim.staleReason}` : ""})
                </>
              )}{" "}
              ·{" "}
              {entry.claim.holder.runId ? (
                <Link className="text-sky-700 underline" href={`/runs/${entry.claim.holder.runId}`}>
                  run {entry.claim.holder.runId}
                </Link>
              ) : null}{" "}
              ·{" "}
              <Link className="text-sky-700 underline" href="/claims">
                {entry.claim.revoked ? "Claims page" : "Claims page (force release)"}
              </Link>
            </>
          ) : (
            <span className="text-slate-500">free</span>
          )}
        </dd>
        <dt className="text-slate-500">Last run</dt>
        <dd className="text-xs">
          {entry.lastRun ? (
            <span className="inline-flex flex-wrap items-center gap-2">
              <StatusBadge status={entry.lastRun.status} />
              <Link className="text-sky-700 underline" href={`/runs/${entry.lastRun.id}`}>
                started <Time at={entry.lastRun.startedAt} />
              </Link>
              <span title={runDurationNote(entry.lastRun) ?? undefined}>{formatRunDuration(entry.lastRun)}</span>
            </span>
          ) : (
            <span className="text-slate-500">none started</span>
          )}
        </dd>
        <dt className="text-slate-500" title={SKIPS_TITLE}>
          Claim-held skips in a row
        </dt>
        <dd data-field="skips">{entry.consecutiveSkips}</dd>
        <dt className="text-slate-500">Last 30 runs</dt>
        <dd>
          <RunStrip runs={entry.recentRuns} label={label} />
        </dd>
      </dl>
      {open ? (
        <div className="rounded bg-slate-50 p-3">
          <RebuildNowForm
            id={panelId}
            rebuild={entry}
            onDone={() => {
              setOpen(false);
              toggle.current?.focus();
            }}
          />
        </div>
      ) : null}
    </div>
  );
}
