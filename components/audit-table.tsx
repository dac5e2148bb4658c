"use client";

import { useQuery } from "@tanstack/react-query";
import type { AuditPage } from "@/lib/audit/list";
import Link from "next/link";
import { auditQuery, rebuildHref } from "@/lib/ui/queries";
import { usePollEvery } from "./live-events";
import { DataTable } from "./data-table";
import { Time } from "./time";

/**
 * `entry`: the page starts with that entry (a link from a run or the CLI), marked as current;
 * `cursor`: an older page. Older is a link (`?cursor=`), so the browser's history holds the pages.
 */
export function AuditTable({
  initial,
  entry: linked = null,
  cursor = null,
  limit,
}: {
  initial: AuditPage | null;
  entry?: string | null;
  cursor?: string | null;
  limit: number;
}) {
  const { data, error } = useQuery({
    ...auditQuery({ entry: linked, cursor, limit }),
    refetchInterval: usePollEvery(5_000),
    ...(initial ? { initialData: initial } : {}),
  });
  if (error) return <p className="text-sm text-red-700">Could not load the audit log: {error.message}</p>;
  if (data && data.entries.length === 0) return <p className="text-sm text-slate-600">Nothing audited yet.</p>;
  return (
    <div className="space-y-3">
      <DataTable label="Audit log" columns={["When", "Who", "Action", "Result", "What", "Why"]}>
        {(data?.entries ?? []).map((entry) => (
          <tr
            key={entry.id}
            id={`audit-${entry.id}`}
            aria-current={entry.id === linked ? "true" : undefined}
            className={`border-t border-slate-100 align-top ${entry.id === linked ? "bg-amber-50" : ""}`}
            data-action={entry.action}
            data-result={entry.result}
          >
            <td className="px-3 py-2 text-xs whitespace-nowrap">
              <Time at={entry.at} />
            </td>
            <td className="px-3 py-2">{entry.actor}</td>
            <td className="px-3 py-2">{entry.action}</td>
            <td className="px-3 py-2">
              <span
                className={
                  entry.result === "done"
                    ? "text-emerald-800"
                    : entry.result === "refused"
                      ? "text-amber-800"
                      : "text-red-800"
                }
              >
                {entry.result}
              </span>
            </td>
            <td className="px-3 py-2 font-mono text-xs break-all">
              {describeDetail(entry.detail)}
              <TrailLink detail={entry.detail} />
            </td>
            <td className="px-3 py-2">{entry.reason}</td>
          </tr>
        ))}
      </DataTable>
      {data?.nextCursor ? (
        <Link
          className="inline-block rounded border px-2 py-1 text-sm"
          href={`/audit?cursor=${encodeURIComponent(data.nextCursor)}`}
        >
          Older
        </Link>
      ) : null}
    </div>
  );
}

function describeDetail(detail: Record<string, unknown>): string {
  return Object.entries(detail)
    .filter(([, v]) => v !== null && v !== undefined && v !== "")
    .map(([k, v]) => `${k}=${typeof v === "object" ? JSON.stringify(v) : String(v)}`)
    .join(" ");
}

/**
 * A force release links to the claim trail of its rebuild (who held it, what happened next); a
 * claim of no rebuild (the alert evaluator's, a pruner's) has no rebuild page to link to.
 */
function TrailLink({ detail }: { detail: Record<string, unknown> }) {
  const holder = detail.holder as { rebuild?: unknown; tenant?: unknown } | undefined;
  if (!holder || typeof holder.rebuild !== "string" || holder.rebuild === "") return null;
  const tenant = typeof holder.tenant === "string" ? holder.tenant : null;
  return (
    <>
      {" "}
      <Link className="font-sans text-sky-700 underline" href={`${rebuildHref(holder.rebuild, tenant)}#claim-trail`}>
        claim trail
      </Link>
    </>
  );
}
