"use client";

import { useQuery } from "@tanstack/react-query";
import { useServerFirstQuery } from "./use-now";
import Link from "next/link";
import { useSearchParams } from "next/navigation";
import { useEffect, useState } from "react";
import type { RunPage } from "@/lib/runs/list";
import { RUN_STATUSES, type RunStatus } from "@/lib/runs/types";
import { LIVE_POLL_MS, rebuildHref, runsQuery, type RunsFilter } from "@/lib/ui/queries";
import { usePollEvery } from "./live-events";
import { DataTable } from "./data-table";
import { NotReadYet } from "./not-read-yet";
import { formatRunDuration, runDurationNote } from "@/lib/ui/format";
import { Time } from "./time";
import { StatusBadge } from "./status-badge";
import { replaceUrlParam, SearchBox } from "./search-box";

export interface RunsTableProps {
  initial: RunPage | null;
  initialFilter: RunsFilter & { jobId?: string };
  /** The page the URL names (`?cursor=`): Back, a reload or a shared link open that page again. */
  initialCursor?: string;
  /**
   * The URL's `?cursor=` when the server could not use it (malformed, cut short: said above the
   * list): the walk starts from the newest page instead, and the URL drops it.
   */
  refusedCursor?: string;
  rebuilds: { name: string; tenants: string[] | null }[];
  /** Why the server could not read the runs for the page, or null. */
  readError?: string | null;
}

export function RunsTable({
  initial,
  initialFilter,
  initialCursor,
  refusedCursor,
  rebuilds,
  readError = null,
}: RunsTableProps) {
  const [filter, setFilter] = useState<RunsFilter & { jobId?: string }>(initialFilter);
  // The page the URL names now: after Back or Forward the router may render this page from its
  // cache, with the props of another URL. One the server refused is no page (black-box helper-152:
  // the list read it again and showed nothing but its error).
  const named = useSearchParams().get("cursor") ?? "";
  const urlCursor = named && named === refusedCursor ? "" : named;
  useEffect(() => {
    if (refusedCursor && new URL(window.location.href).searchParams.get("cursor") === refusedCursor) {
      replaceUrlParam("cursor", undefined);
    }
  }, [refusedCursor]);
  // The pages walked to from the newest (each an older page's cursor); the last is shown.
  const [cursors, setCursors] = useState<string[]>(urlCursor ? [urlCursor] : []);
  const query = { ...filter, ...(cursors.length ? { cursor: cursors[cursors.length - 1] } : {}) };
  const isInitial =
    (cursors.at(-1) ?? "") === (initialCursor ?? "") && JSON.stringify(filter) === JSON.stringify(initialFilter);
  // A page is a history entry (`?cursor=`): Back and Forward walk the pages, and a run opened
  // from a page comes back to it.
  const page = (next: string[]) => {
    setCursors(next);
    const url = new URL(window.location.href);
    const cursor = next.at(-1);
    if (cursor) url.searchParams.set("cursor", cursor);
    else url.searchParams.delete("cursor");
    window.history.pushState(null, "", url);
  };
  // Back or Forward to another page: the walk follows the URL (set while rendering, as React
  // advises for state that follows a changed input).
  const [followed, setFollowed] = useState(urlCursor);
  if (followed !== urlCursor) {
    setFollowed(urlCursor);
    setCursors((walked) => {
      if ((walked.at(-1) ?? "") === urlCursor) return walked;
      if (!urlCursor) return [];
      const at = walked.indexOf(urlCursor);
      return at >= 0 ? walked.slice(0, at + 1) : [...walked, urlCursor];
    });
  }
  const serverPage = initial && isInitial ? initial : null;
  const { data, error } = useServerFirstQuery(
    useQuery({
      ...runsQuery(query),
      refetchInterval: usePollEvery(LIVE_POLL_MS),
      ...(serverPage ? { initialData: serverPage } : {}),
    }),
    serverPage,
  );
  const tenants = rebuilds.find((r) => r.name === filter.rebuild)?.tenants ?? null;
  const change = (next: RunsFilter & { jobId?: string }) => {
    setCursors([]);
    replaceUrlParam("cursor", undefined);
    const kept = Object.fromEntries(Object.entries(next).filter(([, v]) => v)) as RunsFilter;
    setFilter(kept);
    // The URL keeps the filter (replaced in place), so a link shares it.
    for (const name of ["q", "rebuild", "tenant", "status", "jobId"] as const) {
      replaceUrlParam(name, (kept as Record<string, string | undefined>)[name]);
    }
  };
  const search = data && "search" in data ? data.search : undefined;

  return (
    <div className="space-y-3">
      <form className="flex flex-wrap gap-3 text-sm" aria-label="Filter runs" onSubmit={(e) => e.preventDefault()}>
        <SearchBox
          label="Rebuild name contains"
          placeholder="e.g. tiles"
          initial={initialFilter.q ?? ""}
          // A search replaces the rebuild and tenant filters (the API takes one or the other).
          onSearch={(q) => change({ ...filter, q: q || undefined, rebuild: undefined, tenant: undefined })}
        />
        <label className="flex min-w-0 max-w-full flex-col">
          <span className="text-xs text-slate-600">Rebuild</span>
          <select
            className="max-w-full min-w-0 rounded border border-slate-300 px-2 py-1"
            value={filter.rebuild ?? ""}
            disabled={Boolean(filter.q)}
            title={filter.q ? "clear the search to pick one rebuild" : undefined}
            onChange={(e) => change({ ...filter, rebuild: e.target.value || undefined, tenant: undefined })}
          >
            <option value="">all</option>
            {rebuilds.map((r) => (
              <option key={r.name}>{r.name}</option>
            ))}
          </select>
        </label>
        <label className="flex min-w-0 max-w-full flex-col">
          <span className="text-xs text-slate-600">Tenant</span>
          <select
            className="max-w-full min-w-0 rounded border border-slate-300 px-2 py-1"
            value={filter.tenant ?? ""}
            disabled={!tenants}
            onChange={(e) => change({ ...filter, tenant: e.target.value || undefined })}
          >
            <option value="">all</option>
            {(tenants ?? []).map((t) => (
              <option key={t}>{t}</option>
            ))}
          </select>
        </label>
        <label className="flex min-w-0 max-w-full flex-col">
          <span className="text-xs text-slate-600">Status</span>
          <select
            className="max-w-full min-w-0 rounded border border-slate-300 px-2 py-1"
            value={filter.status ?? ""}
            onChange={(e) => change({ ...filter, status: (e.target.value || undefined) as RunStatus | undefined })}
          >
            <option value="">all</option>
            {RUN_STATUSES.map((s) => (
              <option key={s}>{s}</option>
            ))}
          </select>
        </label>
        {filter.jobId ? (
          <button
            type="button"
            className="self-end rounded border px-2 py-1"
            onClick={() => change({ ...filter, jobId: undefined })}
          >
            Job {filter.jobId} ✕
          </button>
        ) : null}
      </form>
      {error ? <p className="text-sm text-red-700">Could not load runs: {error.message}</p> : null}
      {!data && !error ? <NotReadYet what="the runs" serverError={readError} field="runs-reading" /> : null}
      {search && filter.q ? (
        <p className="text-sm text-slate-600" role="status" data-field="runs-search">
          {search.matched === 0
            ? `No rebuild name contains “${filter.q}”.`
            : search.searched < search.matched
              ? `Runs of the first ${search.searched} of ${search.matched} rebuilds matching “${filter.q}” (by name); type more to narrow it.`
              : `Runs of ${search.matched} rebuild${search.matched === 1 ? "" : "s"} matching “${filter.q}”.`}
        </p>
      ) : null}
      <DataTable
        label="Runs"
        columns={["Run", "Rebuild", "Status", "Reason", "Started", "Duration", "Worker"]}
        footer={data && data.runs.length === 0 ? <p className="p-3 text-sm text-slate-600">No runs match.</p> : null}
      >
        {(data?.runs ?? []).map((run) => (
          <tr key={run.id} className="border-t border-slate-100 align-top" data-run={run.id} data-status={run.status}>
            <td className="px-3 py-2 font-mono text-xs">
              <Link className="text-sky-700 underline" href={`/runs/${run.id}`}>
                {run.id}
              </Link>
            </td>
            <td className="px-3 py-2">
              <Link className="text-sky-700 underline" href={rebuildHref(run.rebuild, run.tenant)}>
                {run.rebuild}
                {run.tenant ? ` / ${run.tenant}` : ""}
              </Link>
            </td>
            <td className="px-3 py-2">
              <StatusBadge status={run.status} />
            </td>
            <td className="max-w-xs px-3 py-2 text-xs text-slate-600">{run.reason ?? ""}</td>
            <td className="px-3 py-2 text-xs whitespace-nowrap">
              {run.startedAt ? <Time at={run.startedAt} /> : <span className="text-slate-500">not started</span>}
            </td>
            <td className="px-3 py-2 text-xs whitespace-nowrap" title={runDurationNote(run) ?? undefined}>
              {formatRunDuration(run)}
            </td>
            <td className="px-3 py-2 text-xs">{run.workerId ?? "–"}</td>
          </tr>
        ))}
      </DataTable>
      <div className="flex gap-2 text-sm">
        {cursors.length > 0 ? (
          <button type="button" className="rounded border px-2 py-1" onClick={() => page(cursors.slice(0, -1))}>
            Newer
          </button>
        ) : null}
        {data?.nextCursor ? (
          <button
            type="button"
            className="rounded border px-2 py-1"
            onClick={() => page([...cursors, data.nextCursor!])}
          >
            Older
          </button>
        ) : null}
      </div>
    </div>
  );
}
