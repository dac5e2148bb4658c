/**
 * The UI's query-key factory and query builders (general → specific keys, so a mutation can
 * invalidate by prefix) and the fetch helpers of the HTTP API. Browser-side; never imports Redis.
 */
import { keepPreviousData, queryOptions, replaceEqualDeep, type QueryClient } from "@tanstack/react-query";
import type { AuditPage } from "../audit/list";
import type { AlertsView } from "../alerts/read";
import type { ApiClaimPage, TrailEntry } from "../api/claims";
import type { ApiRebuildDetail, ApiRebuildPage, RunPreview } from "../api/rebuilds";
import type { QueueView } from "../operations/queue-view";
import type { ApiRunPage, RunDetail } from "../api/runs";
import type { Timeline } from "../api/timeline";
import type { HealthReport } from "../health/health";
import type { RunStatus } from "../runs/types";
import type { SilentWorker, WorkerStatus } from "../workers/heartbeat";
import { serverClock } from "./server-clock";

export interface RunsFilter {
  /** Rebuild name search (`q` of /api/runs). */
  q?: string;
  rebuild?: string;
  tenant?: string;
  status?: RunStatus;
  cursor?: string;
}

export const queryKeys = {
  all: ["claimwatch"] as const,
  health: () => [...queryKeys.all, "health"] as const,
  claims: {
    all: () => [...queryKeys.all, "claims"] as const,
    page: (cursor: string | null, q = "") => [...queryKeys.claims.all(), { cursor, q }] as const,
    trail: (name: string) => [...queryKeys.claims.all(), "trail", name] as const,
    ended: () => [...queryKeys.claims.all(), "ended"] as const,
  },
  rebuilds: {
    all: () => [...queryKeys.all, "rebuilds"] as const,
    page: (cursor: string | null, q: string) => [...queryKeys.rebuilds.all(), "page", { cursor, q }] as const,
    preview: (name: string, tenant: string | null, version: string, force: boolean) =>
      [...queryKeys.rebuilds.all(), "preview", { name, tenant, version, force }] as const,
    detail: (name: string, tenant: string | null) => [...queryKeys.rebuilds.all(), "detail", { name, tenant }] as const,
  },
  queue: {
    all: () => [...queryKeys.all, "queue"] as const,
    list: (filter: QueueFilter) => [...queryKeys.queue.all(), filter] as const,
  },
  runs: {
    all: () => [...queryKeys.all, "runs"] as const,
    list: (filter: RunsFilter) => [...queryKeys.runs.all(), "list", filter] as const,
    details: () => [...queryKeys.runs.all(), "detail"] as const,
    detail: (id: string) => [...queryKeys.runs.details(), id] as const,
  },
  timeline: {
    all: () => [...queryKeys.all, "timeline"] as const,
    window: (range: string, rebuild: string | null) => [...queryKeys.timeline.all(), range, rebuild] as const,
  },
  workers: () => [...queryKeys.all, "workers"] as const,
  audit: {
    all: () => [...queryKeys.all, "audit"] as const,
    page: (entry: string | null = null, cursor: string | null = null) =>
      [...queryKeys.audit.all(), { entry, cursor }] as const,
  },
  alerts: () => [...queryKeys.all, "alerts"] as const,
};

/**
 * What each operator action changes, as the keys its mutation re-reads, and nothing more: the
 * workers, the health banner, the alerts and the timeline stay as they are. What follows later
 * from the worker (a cancelled run stopping, a force-released holder letting go, a queued run
 * starting) arrives as live events (live-cache.ts), or with the polls when the stream is down.
 */
export const changedBy = {
  /** "Rebuild now" or a retry: a job queued, shown in the queue, the rebuild, the runs; audited. */
  queuedRun: () => [queryKeys.queue.all(), queryKeys.rebuilds.all(), queryKeys.runs.all(), queryKeys.audit.all()],
  /** A cancel: the job removed or told to stop, its run's record (a waiting job's ends cancelled); audited. */
  cancel: () => [queryKeys.queue.all(), queryKeys.rebuilds.all(), queryKeys.runs.all(), queryKeys.audit.all()],
  /** A force release: the claim (its row, trail, the ended list) and its rebuild's page; audited. */
  forceRelease: () => [queryKeys.claims.all(), queryKeys.rebuilds.all(), queryKeys.audit.all()],
  /** A schedule paused or resumed: the rebuild's schedules and the queued tick; audited. */
  schedule: () => [queryKeys.rebuilds.all(), queryKeys.queue.all(), queryKeys.audit.all()],
};

export type OperatorChange = keyof typeof changedBy;

/** Re-reads (the queries on screen) what `change` changed. */
export function rereadChanged(client: QueryClient, change: OperatorChange): void {
  for (const queryKey of changedBy[change]()) void client.invalidateQueries({ queryKey });
}

export interface QueueFilter {
  rebuild?: string;
  tenant?: string;
}

export const HEALTH_POLL_MS = 3_000;
export const LIVE_POLL_MS = 2_000;

export class ApiRequestError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly body: unknown,
  ) {
    super(message);
  }
}

export async function apiFetch<T>(url: string, init: RequestInit = {}, acceptStatus: number[] = []): Promise<T> {
  const response = await fetch(url, {
    cache: "no-store",
    ...init,
    headers: {
      accept: "application/json",
      ...(init.body ? { "content-type": "application/json" } : {}),
      ...init.headers,
    },
  });
  const receivedAt = Date.now();
  const body = (await response.json().catch(() => null)) as unknown;
  // An answer that says the server's time (claims, workers, queue, timeline) sets the page's clock.
  const serverTime = (body as { serverTime?: unknown } | null)?.serverTime;
  if (response.ok && typeof serverTime === "number") serverClock.observe(serverTime, receivedAt);
  // The session ended (a logout in another tab, expiry): the dashboard's pages need a login.
  if (response.status === 401 && typeof window !== "undefined" && window.location.pathname !== "/login")
    window.location.assign("/login");
  if (!response.ok && !acceptStatus.includes(response.status)) {
    const error = (body as { error?: { code?: string; message?: string } } | null)?.error;
    throw new ApiRequestError(
      response.status,
      error?.code ?? "http",
      error?.message ?? `${url} answered ${response.status}`,
      body,
    );
  }
  return body as T;
}

const withQuery = (path: string, params: Record<string, string | undefined>) => {
  const search = new URLSearchParams(Object.entries(params).filter((e): e is [string, string] => Boolean(e[1])));
  const text = search.toString();
  return text ? `${path}?${text}` : path;
};

/**
 * Of the report held and one arriving (a fetch, a live event), the one whose probes were sent
 * later: a fetch sent while Redis hung may answer after the event that said it is back.
 */
export function newerHealth(held: HealthReport | undefined, arriving: HealthReport): HealthReport {
  if (held?.checkedAt !== undefined && arriving.checkedAt !== undefined && held.checkedAt > arriving.checkedAt) {
    return held;
  }
  return arriving;
}

export const healthQuery = () =>
  queryOptions({
    queryKey: queryKeys.health(),
    // 503 carries a full report (Redis down): show it rather than treating it as a fetch error.
    queryFn: () => apiFetch<HealthReport>("/api/health", {}, [503]),
    refetchInterval: HEALTH_POLL_MS,
    structuralSharing: (held, arriving) =>
      replaceEqualDeep(held, newerHealth(held as HealthReport | undefined, arriving as HealthReport)),
  });

export const claimsQuery = (cursor: string | null, q = "") =>
  queryOptions({
    queryKey: queryKeys.claims.page(cursor, q),
    queryFn: () =>
      apiFetch<ApiClaimPage>(
        withQuery("/api/claims", { limit: "100", cursor: cursor ?? undefined, q: q || undefined }),
      ),
    refetchInterval: LIVE_POLL_MS,
    placeholderData: keepPreviousData,
  });

export const claimTrailQuery = (name: string) =>
  queryOptions({
    queryKey: queryKeys.claims.trail(name),
    queryFn: () => apiFetch<{ name: string; entries: TrailEntry[] }>(withQuery("/api/claims/trail", { name })),
    refetchInterval: LIVE_POLL_MS,
    placeholderData: keepPreviousData,
  });

export const endedClaimsQuery = () =>
  queryOptions({
    queryKey: queryKeys.claims.ended(),
    queryFn: () => apiFetch<{ entries: TrailEntry[] }>(withQuery("/api/claims/ended", { limit: "20" })),
    refetchInterval: LIVE_POLL_MS,
    placeholderData: keepPreviousData,
  });

/** Rows per page of the Rebuilds list: the API's default, which the server-rendered first page uses. */
export const REBUILDS_PAGE = 50;

export const rebuildsQuery = (cursor: string | null, q: string) =>
  queryOptions({
    queryKey: queryKeys.rebuilds.page(cursor, q),
    queryFn: () =>
      apiFetch<ApiRebuildPage>(
        withQuery("/api/rebuilds", { limit: String(REBUILDS_PAGE), cursor: cursor ?? undefined, q: q || undefined }),
      ),
    refetchInterval: LIVE_POLL_MS,
    placeholderData: keepPreviousData,
  });

export const previewQuery = (name: string, tenant: string | null, version: string, force: boolean) =>
  queryOptions({
    queryKey: queryKeys.rebuilds.preview(name, tenant, version, force),
    queryFn: () =>
      apiFetch<RunPreview>(
        withQuery(`/api/rebuilds/${encodeURIComponent(name)}/preview`, {
          tenant: tenant ?? undefined,
          version: version || undefined,
          force: force ? "true" : undefined,
        }),
      ),
    refetchInterval: LIVE_POLL_MS,
  });

export const runsQuery = (filter: RunsFilter) =>
  queryOptions({
    queryKey: queryKeys.runs.list(filter),
    queryFn: () => apiFetch<ApiRunPage>(withQuery("/api/runs", { ...filter, limit: "25" })),
    refetchInterval: LIVE_POLL_MS,
    placeholderData: keepPreviousData,
  });

export const runQuery = (id: string) =>
  queryOptions({
    queryKey: queryKeys.runs.detail(id),
    queryFn: () => apiFetch<RunDetail>(`/api/runs/${encodeURIComponent(id)}`),
    refetchInterval: (query) =>
      query.state.data && ["queued", "running"].includes(query.state.data.status) ? 1_000 : 10_000,
  });

export const workersQuery = () =>
  queryOptions({
    queryKey: queryKeys.workers(),
    queryFn: () => apiFetch<{ workers: WorkerStatus[]; silent: SilentWorker[]; serverTime: number }>("/api/workers"),
    refetchInterval: LIVE_POLL_MS,
    placeholderData: keepPreviousData,
  });

/** The newest entries, or (`entry`: a link to one entry) the page that starts with that entry. */
export const auditQuery = ({
  entry = null,
  cursor = null,
  limit = 100,
}: { entry?: string | null; cursor?: string | null; limit?: number } = {}) =>
  queryOptions({
    queryKey: queryKeys.audit.page(entry, cursor),
    queryFn: () =>
      apiFetch<AuditPage>(
        withQuery("/api/audit", {
          limit: String(limit),
          ...(entry ? { entry } : {}),
          ...(cursor ? { cursor } : {}),
        }),
      ),
    refetchInterval: 5_000,
    placeholderData: keepPreviousData,
  });

export const alertsQuery = () =>
  queryOptions({
    queryKey: queryKeys.alerts(),
    queryFn: () => apiFetch<AlertsView>("/api/alerts"),
    refetchInterval: LIVE_POLL_MS,
    placeholderData: keepPreviousData,
  });

export const timelineQuery = (range: "24h" | "7d", rebuild: string | null = null) =>
  queryOptions({
    queryKey: queryKeys.timeline.window(range, rebuild),
    queryFn: () =>
      apiFetch<Timeline>(
        `/api/runs/timeline?range=${range}${rebuild ? `&rebuild=${encodeURIComponent(rebuild)}` : ""}`,
      ),
    refetchInterval: 10_000,
    placeholderData: keepPreviousData,
  });

export const rebuildDetailQuery = (name: string, tenant: string | null) =>
  queryOptions({
    queryKey: queryKeys.rebuilds.detail(name, tenant),
    queryFn: () =>
      apiFetch<ApiRebuildDetail>(
        withQuery(`/api/rebuilds/${encodeURIComponent(name)}`, { tenant: tenant ?? undefined }),
      ),
    refetchInterval: LIVE_POLL_MS,
    placeholderData: keepPreviousData,
  });

export const queueQuery = (filter: QueueFilter) =>
  queryOptions({
    queryKey: queryKeys.queue.list(filter),
    queryFn: () => apiFetch<QueueView>(withQuery("/api/queue", { rebuild: filter.rebuild, tenant: filter.tenant })),
    refetchInterval: LIVE_POLL_MS,
    placeholderData: keepPreviousData,
  });

/** The page of a rebuild (and tenant). */
export function rebuildHref(rebuild: string, tenant?: string | null): string {
  return `/rebuilds/${encodeURIComponent(rebuild)}${tenant ? `/${encodeURIComponent(tenant)}` : ""}`;
}
