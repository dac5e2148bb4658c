"use client";

import { useQuery } from "@tanstack/react-query";
import type { AuditPage } from "@/lib/audit/list";
import { auditQuery } from "@/lib/ui/queries";
import { formatTime } from "./format";

export function AuditTable({ initial }: { initial: AuditPage | null }) {
  const { data, error } = useQuery({
    ...auditQuery(),
    ...(initial ? { initialData: initial } : {}),
  });
  if (error) return <p className="text-sm text-red-700">Could not load the audit log: {error.message}</p>;
  if (data && data.entries.length === 0) return <p className="text-sm text-slate-600">Nothing audited yet.</p>;
  return (
    <div className="overflow-x-auto rounded border border-slate-200 bg-white">
      <table className="min-w-full text-left text-sm" aria-label="Audit log">
        <thead className="bg-slate-100 text-xs uppercase text-slate-600">
          <tr>
            <th className="px-3 py-2">When</th>
            <th className="px-3 py-2">Who</th>
            <th className="px-3 py-2">Action</th>
            <th className="px-3 py-2">Result</th>
            <th className="px-3 py-2">What</th>
            <th className="px-3 py-2">Why</th>
          </tr>
        </thead>
        <tbody>
          {(data?.entries ?? []).map((entry) => (
            <tr
              key={entry.id}
              className="border-t border-slate-100 align-top"
              data-action={entry.action}
              data-result={entry.result}
            >
              <td className="px-3 py-2 text-xs">{formatTime(entry.at)}</td>
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
              <td className="px-3 py-2 font-mono text-xs break-all">{describeDetail(entry.detail)}</td>
              <td className="px-3 py-2">{entry.reason}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}

function describeDetail(detail: Record<string, unknown>): string {
  return Object.entries(detail)
    .filter(([, v]) => v !== null && v !== undefined && v !== "")
    .map(([k, v]) => `${k}=${typeof v === "object" ? JSON.stringify(v) : String(v)}`)
    .join(" ");
}
