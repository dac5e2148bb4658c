"use client";

import { keepPreviousData, useQuery } from "@tanstack/react-query";
import type { HealthReport } from "@/lib/health/health";
import { HEALTH_POLL_MS, healthQuery } from "@/lib/ui/queries";
import { usePollEvery } from "./live-events";
import { useServerFirst } from "./use-now";

/** Green when both Redis servers are reachable, non-evicting and persistent; red with reasons otherwise. */
export function HealthBanner({ initial }: { initial: HealthReport }) {
  const { data, isError } = useQuery({
    ...healthQuery(),
    refetchInterval: usePollEvery(HEALTH_POLL_MS),
    initialData: initial,
    placeholderData: keepPreviousData,
  });
  const report = useServerFirst(data, initial) ?? initial;
  const problems = isError ? ["The dashboard server did not answer /api/health", ...report.problems] : report.problems;
  const healthy = !isError && report.ok && problems.length === 0;
  const version = report.redis.ok ? report.redis.version : null;
  // What a crash of the claims Redis may lose (issue 14): said in either state, never hidden.
  const durability = report.claimsRedis.ok ? report.claimsRedis.durability : null;
  const durabilityLine = durability ? (
    <span className="block" data-durability={durability.level}>
      Claims Redis durability: {durability.detail}
      {durability.level === "durable"
        ? "."
        : ". Published fences are also kept beside each output, so a lost write cannot reissue a fence or roll back current."}
    </span>
  ) : null;

  return (
    <div
      role="status"
      aria-label="System health"
      data-health={healthy ? "ok" : "problem"}
      className={
        healthy
          ? "border-b border-emerald-300 bg-emerald-50 px-6 py-2 text-sm text-emerald-900"
          : "border-b border-red-300 bg-red-50 px-6 py-2 text-sm text-red-900"
      }
    >
      <a href="/alerts" className="float-right underline" data-field="alerts-link">
        {report.alertsFiring ? `${report.alertsFiring} alert${report.alertsFiring === 1 ? "" : "s"} firing` : "Alerts"}
      </a>
      {healthy ? (
        <span>
          Healthy: Redis {version} reachable, noeviction, persistence {report.redis.ok ? report.redis.persistence : "?"}
          ; {report.workers ?? 0} worker
          {report.workers === 1 ? "" : "s"} live.
          {durabilityLine}
        </span>
      ) : (
        <>
          <ul className="list-inside list-disc">
            {problems.map((problem) => (
              <li key={problem}>{problem}</li>
            ))}
          </ul>
          {durabilityLine}
        </>
      )}
    </div>
  );
}
