"use client";

import { useMutation, useQuery, useQueryClient } from "@tanstack/react-query";
import { useState } from "react";
import type { AlertsView } from "@/lib/alerts/read";
import { alertsQuery, apiFetch, queryKeys } from "@/lib/ui/queries";
import { DataTable } from "./data-table";
import { formatAbsolute as formatTime, formatRelative as formatAgo } from "@/lib/ui/format";
import { useCanOperate } from "./role";
import { useServerNow } from "./use-now";

const labelOf = (labels: Record<string, string>) =>
  [labels.rebuild && `${labels.rebuild}${labels.tenant ? `/${labels.tenant}` : ""}`, labels.claim]
    .filter(Boolean)
    .join(" · ");

/** Firing alerts, recent transitions and each receiver's last delivery; operators can send a test. */
export function AlertsPanel({ initial }: { initial: AlertsView | null }) {
  const { data, error } = useQuery({ ...alertsQuery(), ...(initial ? { initialData: initial } : {}) });
  const now = useServerNow();
  const canOperate = useCanOperate();
  const [notice, setNotice] = useState<string | null>(null);
  if (error) return <p className="text-sm text-red-700">Could not load alerts: {error.message}</p>;
  if (!data) return <p className="text-sm text-slate-600">Loading…</p>;
  if (!data.configured) {
    return (
      <p className="text-sm text-slate-700">
        Alerts are not configured: add an <code>alerts:</code> section to claimwatch.yaml (see the README, “Alerts and
        metrics”).
      </p>
    );
  }
  return (
    <div className="space-y-6">
      <p className="text-sm text-slate-600" data-field="evaluator">
        {data.evaluator.holder
          ? `Evaluated by ${data.evaluator.holder}, fence ${data.evaluator.fence ?? "?"}.`
          : "No process is evaluating alerts right now (a worker or dashboard takes over within a few intervals)."}
      </p>
      {notice ? (
        <p role="status" className="rounded border border-slate-300 bg-slate-50 px-3 py-2 text-sm">
          {notice}
        </p>
      ) : null}
      <section aria-labelledby="firing-title" className="space-y-2">
        <h2 id="firing-title" className="text-lg font-semibold">
          Firing ({data.firing.length})
        </h2>
        {data.firing.length === 0 ? (
          <p className="text-sm text-emerald-800">Nothing is firing.</p>
        ) : (
          <DataTable label="Firing alerts" columns={["Alert", "Severity", "Subject", "Summary", "Since"]}>
            {data.firing.map((alert) => (
              <tr key={alert.id} className="border-t border-slate-100" data-alert={alert.labels.alertname}>
                <td className="px-3 py-2 font-medium">{alert.labels.alertname}</td>
                <td className="px-3 py-2">{alert.labels.severity}</td>
                <td className="px-3 py-2 font-mono text-xs break-all">{labelOf(alert.labels)}</td>
                <td className="px-3 py-2">
                  <a className="underline" href={new URL(alert.annotations.link).pathname}>
                    {alert.annotations.summary}
                  </a>
                  <div className="text-xs text-slate-600">{alert.annotations.description}</div>
                </td>
                <td className="px-3 py-2" title={formatTime(alert.startsAt)}>
                  {formatAgo(alert.startsAt, now)}
                </td>
              </tr>
            ))}
          </DataTable>
        )}
      </section>
      <section aria-labelledby="receivers-title" className="space-y-2">
        <h2 id="receivers-title" className="text-lg font-semibold">
          Receivers
        </h2>
        {data.receivers.length === 0 ? (
          <p className="text-sm text-slate-700">
            No receivers configured: alerts show here and in <code>/metrics</code> only.
          </p>
        ) : (
          <DataTable
            label="Receivers"
            columns={[
              "Receiver",
              "Kind",
              "Target",
              "Last delivery",
              "Waiting",
              ...(canOperate ? [{ hidden: "Test" }] : []),
            ]}
          >
            {data.receivers.map((receiver) => (
              <tr key={receiver.name} className="border-t border-slate-100" data-receiver={receiver.name}>
                <td className="px-3 py-2 font-medium">{receiver.name}</td>
                <td className="px-3 py-2">{receiver.kind}</td>
                <td className="px-3 py-2 font-mono text-xs break-all">{receiver.target}</td>
                <td className="px-3 py-2" data-field="last-delivery">
                  {receiver.last ? (
                    <span className={receiver.last.status === "delivered" ? "text-emerald-800" : "text-red-800"}>
                      {receiver.last.status} {formatAgo(receiver.last.at, now)}
                      {receiver.last.error ? `: ${receiver.last.error}` : ""}
                    </span>
                  ) : (
                    "never"
                  )}
                </td>
                <td className="px-3 py-2">
                  {receiver.queued}
                  {receiver.lastError ? (
                    <div className="text-xs text-red-800">
                      retry {formatAgo(receiver.nextAt, now)} ({receiver.lastError})
                    </div>
                  ) : null}
                </td>
                {canOperate ? (
                  <td className="px-3 py-2">
                    <TestButton receiver={receiver.name} onDone={setNotice} />
                  </td>
                ) : null}
              </tr>
            ))}
          </DataTable>
        )}
      </section>
      <section aria-labelledby="transitions-title" className="space-y-2">
        <h2 id="transitions-title" className="text-lg font-semibold">
          Recent transitions
        </h2>
        <DataTable label="Recent transitions" columns={["Time", "Status", "Alert", "Subject", "Summary"]}>
          {data.transitions.map((t) => (
            <tr key={t.streamId} className="border-t border-slate-100">
              <td className="px-3 py-2" title={formatTime(t.at)}>
                {formatAgo(t.at, now)}
              </td>
              <td className={t.status === "firing" ? "px-3 py-2 text-red-800" : "px-3 py-2 text-emerald-800"}>
                {t.status}
              </td>
              <td className="px-3 py-2">{t.alert.labels.alertname}</td>
              <td className="px-3 py-2 font-mono text-xs break-all">{labelOf(t.alert.labels)}</td>
              <td className="px-3 py-2">{t.alert.annotations.summary}</td>
            </tr>
          ))}
        </DataTable>
      </section>
    </div>
  );
}

function TestButton({ receiver, onDone }: { receiver: string; onDone: (message: string) => void }) {
  const queryClient = useQueryClient();
  const test = useMutation({
    mutationFn: () =>
      apiFetch<{ status: "queued"; deliveryId: string }>("/api/alerts/test", {
        method: "POST",
        body: JSON.stringify({ receiver, reason: "test from the Alerts page" }),
      }),
    onSuccess: (result) => {
      void queryClient.invalidateQueries({ queryKey: queryKeys.alerts() });
      onDone(
        `Test notification to ${receiver} queued (delivery ${result.deliveryId}); its result shows under Last delivery.`,
      );
    },
    onError: (error) => onDone(`Not sent: ${error.message}`),
  });
  return (
    <button
      type="button"
      className="rounded border border-slate-300 px-2 py-1 text-xs hover:bg-slate-100 disabled:opacity-50"
      disabled={test.isPending}
      onClick={() => test.mutate()}
    >
      Send test
    </button>
  );
}
