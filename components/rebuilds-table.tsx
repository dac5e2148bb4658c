"use client";

import { useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { useServerFirstQuery } from "./use-now";
import { TtlLeft } from "./ttl-left";
import Link from "next/link";
import { useId, useRef, useState } from "react";
import type { ApiRebuild, ApiRebuildPage } from "@/lib/api/rebuilds";
import {
  apiFetch,
  LIVE_POLL_MS,
  previewQuery,
  rereadChanged,
  REBUILDS_PAGE,
  rebuildHref,
  rebuildsQuery,
} from "@/lib/ui/queries";
import { SearchBox } from "./search-box";
import { usePollEvery } from "./live-events";
import { CursorPager } from "./cursor-pager";
import { DataTable } from "./data-table";
import { NotReadYet } from "./not-read-yet";
import { formatRunDuration, runDurationNote, SKIPS_TITLE } from "@/lib/ui/format";
import { releasingText } from "@/lib/ui/release-notice";
import { RunStrip, RunStripLegend } from "./run-strip";
import { useCanOperate } from "./role";
import { StatusBadge } from "./status-badge";
import { Time } from "./time";

/**
 * The rebuild×tenant rows, a page at a time (the API reads the live state of one page only), with
 * a name search kept in the URL.
 */
export function RebuildsTable({
  initial,
  initialQ = "",
  readError = null,
}: {
  initial: ApiRebuildPage | null;
  initialQ?: string;
  /** Why the server could not read the rebuilds for the page, or null. */
  readError?: string | null;
}) {
  const [cursors, setCursors] = useState<(string | null)[]>([null]);
  const [q, setQ] = useState(initialQ);
  const cursor = cursors[cursors.length - 1] ?? null;
  const serverPage = initial && cursor === null && q === initialQ ? initial : null;
  const query = useQuery({
    ...rebuildsQuery(cursor, q),
    refetchInterval: usePollEvery(LIVE_POLL_MS),
    ...(serverPage ? { initialData: serverPage } : {}),
  });
  const { data, error } = useServerFirstQuery(query, serverPage);
  const [open, setOpen] = useState<string | null>(null);
  const first = (cursors.length - 1) * REBUILDS_PAGE;
  return (
    <div className="space-y-3">
      <form role="search" aria-label="Search rebuilds" onSubmit={(event) => event.preventDefault()}>
        <SearchBox
          label="Rebuild or tenant name contains"
          placeholder="e.g. tiles or acme"
          initial={initialQ}
          onSearch={(next) => {
            setCursors([null]);
            setQ(next);
          }}
        />
      </form>
      {error ? <p className="text-sm text-red-700">Could not load rebuilds: {error.message}</p> : null}
      {data ? (
        <p className="text-sm text-slate-600" data-field="rebuilds-count" role="status">
          {data.total === 0
            ? q
              ? `No rebuild or tenant name contains “${q}”.`
              : "No rebuilds are defined."
            : `${first + 1}–${first + data.rebuilds.length} of ${data.total}${q ? ` matching “${q}”` : ""}`}
        </p>
      ) : error ? null : (
        // Not read yet (Redis was down when the page was served): not "no rebuilds".
        <NotReadYet what="the rebuilds" serverError={readError} field="rebuilds-count" />
      )}
      <RunStripLegend />
      <DataTable
        label="Rebuilds"
        columns={["Rebuild", "Schedule", "Last run", "Skips", "Claim", "Last 30 runs", { hidden: "Actions" }]}
      >
        {(data?.rebuilds ?? []).map((rebuild) => {
          const key = `${rebuild.name}/${rebuild.tenant ?? ""}`;
          return (
            <RebuildRow
              key={key}
              rebuild={rebuild}
              open={open === key}
              onToggle={() => setOpen(open === key ? null : key)}
              readAt={query.dataUpdatedAt}
            />
          );
        })}
      </DataTable>
      <CursorPager cursors={cursors} nextCursor={data?.nextCursor} onChange={setCursors} />
    </div>
  );
}

function RebuildRow({
  rebuild,
  open,
  onToggle,
  readAt,
}: {
  rebuild: ApiRebuild;
  open: boolean;
  onToggle: () => void;
  /** When the page received `rebuild` (browser ms): its claim's TTL counts down from then. */
  readAt: number;
}) {
  const panelId = useId();
  const toggle = useRef<HTMLButtonElement>(null);
  const canOperate = useCanOperate();
  const label = `${rebuild.name}${rebuild.tenant ? ` / ${rebuild.tenant}` : ""}`;
  return (
    <>
      <tr
        className="border-t border-slate-100 align-top"
        data-rebuild={rebuild.name}
        data-tenant={rebuild.tenant ?? ""}
      >
        <td className="px-3 py-2">
          <div className="font-medium">
            <Link className="text-sky-700 underline" href={rebuildHref(rebuild.name, rebuild.tenant)}>
              {label}
            </Link>
          </div>
          <div className="font-mono text-xs text-slate-500">{rebuild.output}</div>
          {rebuild.changedBuilds.map((build) => (
            <div
              key={build.path}
              data-field="changed-build"
              className="mt-1 rounded bg-red-100 px-1.5 py-0.5 text-xs text-red-900"
              title={`found ${new Date(build.foundAt).toISOString()} by ${build.foundBy}`}
            >
              {build.kind === "unsynced"
                ? "The disk lost a write; build moved aside: "
                : build.kind === "missing"
                  ? "Published build missing from disk (rebuild with force): "
                  : "Published build changed on disk: "}
              <span className="font-mono">{build.path}</span>
            </div>
          ))}
        </td>
        <td className="px-3 py-2 text-xs">
          {rebuild.schedule ? (
            <>
              <div className="font-mono">
                {rebuild.schedule.cron} ({rebuild.schedule.tz})
              </div>
              {rebuild.schedule.paused ? (
                <div
                  data-field="paused"
                  className="mt-1 inline-block rounded bg-amber-100 px-1.5 py-0.5 font-medium text-amber-900"
                  title={`paused by ${rebuild.schedule.paused.actor}: ${rebuild.schedule.paused.reason}`}
                >
                  paused by {rebuild.schedule.paused.actor}
                </div>
              ) : (
                <>
                  <div data-field="next-run">
                    next: <Time at={Date.parse(rebuild.schedule.nextRunAt)} zone="utc" absolute />
                  </div>
                  <div className="text-slate-500">
                    <Time at={Date.parse(rebuild.schedule.nextRunAt)} />
                  </div>
                </>
              )}
            </>
          ) : (
            <span className="text-slate-500">on demand</span>
          )}
        </td>
        <td className="px-3 py-2 text-xs">
          {rebuild.lastRun ? (
            <>
              <StatusBadge status={rebuild.lastRun.status} />
              <div className="mt-1">
                <Link className="text-sky-700 underline" href={`/runs/${rebuild.lastRun.id}`} data-field="last-run">
                  started <Time at={rebuild.lastRun.startedAt} />
                </Link>
              </div>
              <div title={runDurationNote(rebuild.lastRun) ?? undefined}>{formatRunDuration(rebuild.lastRun)}</div>
            </>
          ) : (
            <span className="text-slate-500">none started</span>
          )}
        </td>
        <td className="px-3 py-2" data-field="skips" title={SKIPS_TITLE}>
          {rebuild.consecutiveSkips}
        </td>
        <td className="px-3 py-2 text-xs">
          {rebuild.claim?.revoked ? (
            <>
              <div>held by {rebuild.claim.holder.workerId}</div>
              <div className="text-amber-900" data-state="releasing">
                {releasingText(rebuild.claim)}
              </div>
            </>
          ) : rebuild.claim ? (
            <>
              <div>held by {rebuild.claim.holder.workerId}</div>
              <div>
                <TtlLeft pttlMs={rebuild.claim.pttlMs} readAt={readAt} /> left{rebuild.claim.stale ? " · stale" : ""}
              </div>
            </>
          ) : (
            <span className="text-slate-500">free</span>
          )}
        </td>
        <td className="px-3 py-2">
          <RunStrip runs={rebuild.recentRuns} label={label} />
        </td>
        <td className="px-3 py-2">
          {canOperate ? (
            <button
              type="button"
              ref={toggle}
              aria-expanded={open}
              aria-controls={open ? panelId : undefined}
              aria-label={`Rebuild now: ${label}`}
              onClick={onToggle}
              className="rounded bg-slate-900 px-2 py-1 text-xs font-medium text-white"
            >
              Rebuild now
            </button>
          ) : null}
        </td>
      </tr>
      {open ? (
        <tr className="bg-slate-50">
          <td colSpan={7} className="px-3 py-3">
            <RebuildNowForm
              id={panelId}
              rebuild={rebuild}
              onDone={() => {
                onToggle();
                toggle.current?.focus();
              }}
            />
          </td>
        </tr>
      ) : null}
    </>
  );
}

/** A fresh id for one "Rebuild now" request (the server queues one job per id). */
const newRequestId = () => `ui-${crypto.randomUUID()}`;

/**
 * Rebuild now: the preview says what would happen; a run the preview says will be skipped is
 * queued only through an explicit "Queue anyway". One request id per preview (version, force):
 * a second submit of the same preview — a double click, a resend — answers with the first job.
 * `onDone` (Close, Escape) gives the focus back to the button that opened it.
 */
export function RebuildNowForm({ id, rebuild, onDone }: { id: string; rebuild: ApiRebuild; onDone: () => void }) {
  const queryClient = useQueryClient();
  const [version, setVersion] = useState("");
  const [force, setForce] = useState(false);
  const [reason, setReason] = useState("");
  const [requestId, setRequestId] = useState(newRequestId);
  const preview = useQuery({
    ...previewQuery(rebuild.name, rebuild.tenant, version.trim(), force),
    refetchInterval: usePollEvery(LIVE_POLL_MS),
  });
  // Set at the first submit, before React disables the button: a double click sent two requests
  // (one job, thanks to the request id, but the answers raced: "Already queued" for our own).
  const sending = useRef(false);
  const trigger = useMutation({
    mutationFn: () =>
      apiFetch<{ jobId: string; status: string }>(`/api/rebuilds/${encodeURIComponent(rebuild.name)}/runs`, {
        method: "POST",
        body: JSON.stringify({
          ...(rebuild.tenant ? { tenant: rebuild.tenant } : {}),
          ...(version.trim() ? { version: version.trim() } : {}),
          force,
          ...(reason.trim() ? { reason: reason.trim() } : {}),
          requestId,
        }),
      }),
    onSuccess: () => rereadChanged(queryClient, "queuedRun"),
    onSettled: () => {
      sending.current = false;
    },
  });
  // Another preview (version, force): another request.
  const changePreview = (apply: () => void) => {
    apply();
    setRequestId(newRequestId());
    trigger.reset();
  };
  // The preview says whether a worker is live (`workersLive`): a run "would run now" only then.
  const p = preview.data;
  // A run the preview says is skipped or fails is queued only on purpose.
  const skipped = p?.outcome === "skip" || p?.outcome === "fails";
  return (
    <form
      id={id}
      className="flex flex-wrap items-end gap-3 text-sm"
      aria-label={`Rebuild ${rebuild.name}${rebuild.tenant ? ` / ${rebuild.tenant}` : ""} now`}
      onSubmit={(event) => {
        event.preventDefault();
        if (sending.current || trigger.data) return;
        sending.current = true;
        trigger.mutate();
      }}
      onKeyDown={(event) => {
        if (event.key === "Escape") onDone();
      }}
    >
      <label className="flex flex-col">
        <span className="text-xs text-slate-600">Version (optional)</span>
        <input
          className="rounded border border-slate-300 px-2 py-1 font-mono"
          value={version}
          placeholder={p?.version ?? "hash of the inputs"}
          onChange={(event) => changePreview(() => setVersion(event.target.value))}
        />
      </label>
      <label className="flex items-center gap-1">
        <input
          type="checkbox"
          checked={force}
          onChange={(event) => changePreview(() => setForce(event.target.checked))}
        />
        <span>Force (ignore "already rebuilt"; never the claim)</span>
      </label>
      <label className="flex flex-col">
        <span className="text-xs text-slate-600">Reason (optional)</span>
        <input
          className="rounded border border-slate-300 px-2 py-1"
          value={reason}
          onChange={(e) => setReason(e.target.value)}
        />
      </label>
      {skipped ? (
        <button
          type="submit"
          disabled={trigger.isPending || Boolean(trigger.data)}
          className="rounded border border-amber-600 bg-amber-50 px-3 py-1.5 font-medium text-amber-900 disabled:opacity-50"
        >
          Queue anyway
        </button>
      ) : (
        <button
          type="submit"
          disabled={trigger.isPending || Boolean(trigger.data) || (!p && !preview.error)}
          className="rounded bg-sky-700 px-3 py-1.5 font-medium text-white disabled:opacity-50"
        >
          Queue rebuild
        </button>
      )}
      <button type="button" className="rounded border px-3 py-1.5" onClick={onDone}>
        Close
      </button>
      <p className="basis-full text-sm" data-field="preview" role="status">
        {/* Once queued, the preview is of another request: said so, or it reads as this one's fate. */}
        {trigger.data && p ? "Another request now: " : ""}
        {preview.error
          ? `Cannot tell what would happen: ${preview.error.message}`
          : !p
            ? "Checking…"
            : p.outcome === "runs"
              ? p.workersLive === 0
                ? `Would run once a worker is live: none is now; it waits in the queue (version ${p.version}).`
                : `Would run now (version ${p.version}).`
              : `${
                  p.outcome === "skip"
                    ? `${p.message}. Queueing it anyway records a skip.`
                    : p.outcome === "fails"
                      ? `${p.message}. Queueing it anyway records a failure.`
                      : p.message
                }${p.workersLive === 0 ? " No worker is live now: it waits in the queue until one starts." : ""}`}
      </p>
      {trigger.data ? (
        <p className="basis-full text-sm text-emerald-800" role="alert">
          {trigger.data.status === "deduplicated" ? "Already queued as" : "Queued as"} job {trigger.data.jobId}.{" "}
          <Link className="underline" href={`/runs?jobId=${encodeURIComponent(trigger.data.jobId)}`}>
            Follow it
          </Link>
        </p>
      ) : null}
      {trigger.error ? <p className="basis-full text-sm text-red-700">{trigger.error.message}</p> : null}
    </form>
  );
}
