/**
 * The UI's query-key factory and query builders (general → specific keys, so a mutation can
 * invalidate by prefix). Browser-side: fetches the HTTP API; never imports Redis.
 */
import { queryOptions } from "@tanstack/react-query";
import type { HealthReport } from "../health/health";

export const queryKeys = {
  all: ["claimwatch"] as const,
  health: () => [...queryKeys.all, "health"] as const,
};

/** How often the banner re-checks; short enough to notice a Redis outage within seconds. */
export const HEALTH_POLL_MS = 3_000;

async function fetchJson<T>(url: string, acceptStatus: number[] = []): Promise<T> {
  const response = await fetch(url, { cache: "no-store", headers: { accept: "application/json" } });
  if (!response.ok && !acceptStatus.includes(response.status)) {
    throw new Error(`${url} answered ${response.status}`);
  }
  return (await response.json()) as T;
}

export const healthQuery = () =>
  queryOptions({
    queryKey: queryKeys.health(),
    // 503 carries a full report (Redis down): show it rather than treating it as a fetch error.
    queryFn: () => fetchJson<HealthReport>("/api/health", [503]),
    refetchInterval: HEALTH_POLL_MS,
  });
