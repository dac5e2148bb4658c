"use client";

import { useQuery } from "@tanstack/react-query";
import Link from "next/link";
import type { ReactNode } from "react";
import type { TrailEntry } from "@/lib/api/claims";
import { claimNameMatches } from "@/lib/claims/search";
import { formatDurationMs } from "@/lib/ui/format";
import { claimTrailQuery, endedClaimsQuery, LIVE_POLL_MS, rebuildHref } from "@/lib/ui/queries";
import { DataTable } from "./data-table";
import { usePollEvery } from "./live-events";
import { Time } from "./time";

/**
 * What happened to one claim name, newest first (lib/claims/trail.ts): acquired, refreshed late,
 * released, force-released (by whom, why), stopped after it, taken over, expired without release
 * (with the last holder). On a rebuild's page; runs and audit entries link here (`#claim-trail`).
 */
export function ClaimTrail({ name, label }: { name: string; label: string }) {
  const { data, error } = useQuery({ ...claimTrailQuery(name), refetchInterval: usePollEvery(LIVE_POLL_MS) });
  if (error) return <p className="text-sm text-red-700">Could not load the claim trail: {error.message}</p>;
  if (!data) return <p className="text-sm text-slate-600">Loading…</p>;
  if (data.entries.length === 0) {
    return <p className="text-sm text-slate-600">Nothing has held the claim of {label} yet.</p>;
  }
  return (
    <DataTable label={`Claim trail of ${label}`} columns={["When", "What", "Holder", "Fence"]}>
      {data.entries.map((entry) => (
        <TrailRow key={entry.id} entry={entry} />
      ))}
    </DataTable>
  );
}

/** Claims that ended recently, below the active ones on the Claims page; `search` as the page's. */
export function EndedClaims({ search = "" }: { search?: string }) {
  const { data, error } = useQuery({ ...endedClaimsQuery(), refetchInterval: usePollEvery(LIVE_POLL_MS) });
  const entries = (data?.entries ?? []).filter((entry) => !search || claimNameMatches(entry.name, search));
  return (
    <section aria-labelledby="ended-title" className="space-y-2">
      <h2 id="ended-title" className="font-semibold">
        Recently ended
      </h2>
      {error ? <p className="text-sm text-red-700">Could not load ended claims: {error.message}</p> : null}
      {data && entries.length === 0 ? (
        <p className="text-sm text-slate-600">
          {search && data.entries.length > 0
            ? `No recently ended claim's name contains “${search}”.`
            : "No claim has ended yet."}
        </p>
      ) : null}
      {entries.length > 0 ? (
        <DataTable label="Recently ended claims" columns={["Ended", "Claim", "How", "Holder", "Fence"]}>
          {entries.map((entry) => (
            <TrailRow key={entry.id} entry={entry} ended />
          ))}
        </DataTable>
      ) : null}
    </section>
  );
}

/**
 * One entry as a table row: when, what, holder, fence; in the `ended` list also which claim.
 * The row carries its kind as `data-trail` (or `data-ended`).
 */
function TrailRow({ entry, ended = false }: { entry: TrailEntry; ended?: boolean }) {
  return (
    <tr className="border-t border-slate-100 align-top" {...{ [ended ? "data-ended" : "data-trail"]: entry.kind }}>
      <td className="px-3 py-2 text-xs whitespace-nowrap">
        <Time at={entry.at} />
      </td>
      {ended ? (
        <td className="px-3 py-2">
          {entry.holder.rebuild ? (
            <Link
              className="font-medium text-sky-700 underline"
              href={`${rebuildHref(entry.holder.rebuild, entry.holder.tenant)}#claim-trail`}
            >
              {entry.holder.rebuild}
              {entry.holder.tenant ? ` / ${entry.holder.tenant}` : ""}
            </Link>
          ) : null}
          <div className="font-mono text-xs break-all text-slate-500">{entry.name}</div>
        </td>
      ) : null}
      <td className="px-3 py-2 text-sm">{describeTrailEntry(entry)}</td>
      <td className="px-3 py-2 text-xs">
        <HolderOf entry={entry} />
      </td>
      <td className="px-3 py-2 font-mono">{entry.fence ?? "–"}</td>
    </tr>
  );
}

function HolderOf({ entry }: { entry: TrailEntry }) {
  const { holder } = entry;
  return (
    <>
      <div className="font-medium">{holder.workerId ?? "?"}</div>
      {holder.version ? <div className="break-all">version {holder.version}</div> : null}
      {holder.runId ? (
        <Link className="break-all text-sky-700 underline" href={`/runs/${holder.runId}`}>
          run {holder.runId}
        </Link>
      ) : null}
    </>
  );
}

/** One trail entry in words. */
export function describeTrailEntry(entry: TrailEntry): ReactNode {
  const ms = entry.ms === null ? null : formatDurationMs(entry.ms);
  switch (entry.kind) {
    case "acquired":
      return `Acquired${ms ? ` (TTL ${ms})` : ""}`;
    case "refreshed-late":
      return `Refreshed late: ${ms ?? "?"} after the refresh before (the holder was slow or paused)`;
    case "released":
      return `Released by its holder${ms ? ` after ${ms}` : ""}`;
    case "force-released":
      return (
        <>
          Force-released by <span className="font-medium">{entry.by ?? "an operator"}</span>
          {entry.reason ? <>: “{entry.reason}”</> : null}; the holder was told to stop (free at the latest after{" "}
          {ms ?? "?"}) ·{" "}
          <Link className="text-sky-700 underline" href="/audit">
            audit log
          </Link>
        </>
      );
    case "stopped":
      return `The holder stopped after the force release and let go${ms ? ` (held ${ms})` : ""}`;
    case "taken-over":
      return `Taken over by the same job's next attempt${entry.by ? ` on ${entry.by}` : ""} (the earlier attempt's worker died or stalled)`;
    case "expired":
      return `Expired without release${entry.reason ? `: ${entry.reason}` : " (the holder stopped refreshing: it died, froze or lost Redis)"}${entry.derived ? " — noticed just now" : ""}`;
  }
}
