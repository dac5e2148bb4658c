/**
 * Applies a live event (lib/events) to React Query's cache: claims and run records are updated
 * in place from the event's data (no request); what an event only names (a run's new log
 * lines, a rebuild's summary, the workers) is invalidated, so only queries on screen re-read,
 * once per burst. Browser-side; never imports Redis.
 */
import type { QueryClient } from "@tanstack/react-query";
import type { ApiClaim, ApiClaimPage } from "../api/claims";
import { claimNameMatches } from "../claims/search";
import type { RunDetail } from "../api/runs";
import type { DeliveredEvent } from "../events/types";
import type { HealthReport } from "../health/health";
import type { RunPage } from "../runs/list";
import type { RunRecord } from "../runs/types";
import { newerHealth, queryKeys, type RunsFilter } from "./queries";

/** Invalidations of the same key within this window become one re-read. */
const COALESCE_MS = 200;
/** The Rebuilds lists show each claim's TTL left as read: a refresh re-reads them at most this often. */
const REBUILDS_ON_REFRESH_MS = 5_000;

export class LiveCache {
  private readonly due = new Map<string, readonly unknown[]>();
  private timer: ReturnType<typeof setTimeout> | undefined;
  /** The last worker count a health report gave (null: none yet). */
  private knownWorkers: number | null = null;
  private rebuildsReadOnRefresh = 0;

  constructor(private readonly client: QueryClient) {}

  apply(event: DeliveredEvent): void {
    // A claim's trail (on its rebuild's page) and the recently ended list follow its events.
    if (event.type.startsWith("claim.") && "name" in event && event.type !== "claim.refreshed") {
      this.invalidateTrail(event.name);
    }
    switch (event.type) {
      case "claim.acquired":
        this.updateClaimPages((claims, serverNow) => {
          const previous = claims.find((c) => c.name === event.name);
          const fresh: ApiClaim = {
            name: event.name,
            rebuild: event.rebuild,
            tenant: event.tenant,
            version: event.version,
            token: event.token,
            fence: event.fence,
            holder: event.holder,
            acquiredAt: event.acquiredAt,
            refreshedAt: event.acquiredAt,
            ttlMs: event.ttlMs,
            pttlMs: Math.max(0, event.ttlMs - Math.max(0, serverNow - event.at)),
            refreshEveryMs: event.refreshEveryMs,
            stale: false,
            staleReason: null,
            holderNotLive: false,
            staleSince: null,
            consecutiveSkips: previous?.consecutiveSkips ?? 0,
            revoked: null,
            retryAfterReleaseMs: previous?.retryAfterReleaseMs ?? null,
          };
          return [...claims.filter((c) => c.name !== event.name), fresh].sort((a, b) =>
            a.name < b.name ? -1 : a.name > b.name ? 1 : 0,
          );
        });
        this.invalidateSoon(queryKeys.rebuilds.all());
        break;
      case "claim.refreshed":
        this.updateClaimPages((claims, serverNow) =>
          claims.map((c) =>
            c.name === event.name && c.token === event.token
              ? {
                  ...c,
                  refreshedAt: event.at,
                  pttlMs: Math.max(0, event.ttlMs - Math.max(0, serverNow - event.at)),
                  stale: false,
                  staleReason: null,
                  holderNotLive: false,
                  staleSince: null,
                }
              : c,
          ),
        );
        // The Rebuilds table and a rebuild's page show the claim's TTL left and staleness, which
        // no run event changes while the run goes on (review helper-132).
        if (Date.now() - this.rebuildsReadOnRefresh >= REBUILDS_ON_REFRESH_MS) {
          this.rebuildsReadOnRefresh = Date.now();
          this.invalidateSoon(queryKeys.rebuilds.all());
        }
        break;
      case "claim.revoked":
        this.updateClaimPages((claims) =>
          claims.map((c) =>
            c.name === event.name && c.token === event.token
              ? { ...c, revoked: { by: event.by, at: event.at }, pttlMs: event.windowMs }
              : c,
          ),
        );
        this.invalidateSoon(queryKeys.audit.all());
        // The Rebuilds list and the rebuild's page say "Releasing" too (helper-168: only after a reload).
        this.invalidateSoon(queryKeys.rebuilds.all());
        break;
      case "claim.released":
      case "claim.lost":
      case "claim.expired":
        // A force-released holder noticed: its row stays ("releasing") until its release acknowledges.
        if (event.type === "claim.lost" && event.cause === "force-released") break;
        this.updateClaimPages((claims) => claims.filter((c) => !(c.name === event.name && c.token === event.token)));
        this.invalidateSoon(queryKeys.rebuilds.all());
        if (event.type === "claim.released" && event.forcedBy) this.invalidateSoon(queryKeys.audit.all());
        break;
      case "run":
        this.applyRun(event.run);
        break;
      case "run.log":
        if (this.client.getQueryData(queryKeys.runs.detail(event.id))) {
          this.invalidateSoon(queryKeys.runs.detail(event.id));
        }
        break;
      case "run.queued":
        this.invalidateSoon(queryKeys.audit.all());
        this.invalidateSoon(queryKeys.rebuilds.all());
        break;
      case "schedule.paused":
      case "schedule.resumed":
        // Paused by whom, or its next tick again, on Rebuilds and the rebuild's page; the queued tick; audited.
        this.invalidateSoon(queryKeys.rebuilds.all());
        this.invalidateSoon(queryKeys.queue.all());
        this.invalidateSoon(queryKeys.audit.all());
        break;
      case "worker.up":
      case "worker.down":
        this.invalidateSoon(queryKeys.workers());
        break;
      case "health": {
        const before = this.client.getQueryData<HealthReport>(queryKeys.health());
        this.client.setQueryData(queryKeys.health(), newerHealth(before, event.report));
        // A probe that could not count the workers (null: Redis slow or away) says nothing about
        // them: compared with the last count known, a slow probe is not two workers changes.
        const known = this.knownWorkers ?? before?.workers ?? null;
        const workers = event.report.workers;
        this.knownWorkers = workers ?? known;
        if (known !== null && workers !== null && known !== workers) {
          // A worker came or went (also one that died without saying so): holders may be stale now,
          // and a run page in flight names its worker silent (its steps stop counting up).
          this.invalidateSoon(queryKeys.workers());
          this.invalidateSoon(queryKeys.claims.all());
          this.invalidateSoon(queryKeys.runs.details());
        }
        break;
      }
    }
  }

  /** Everything on screen is re-read (first connection, or events were missed). */
  refreshAll(): void {
    void this.client.invalidateQueries({ queryKey: queryKeys.all });
  }

  private applyRun(run: Pick<RunRecord, "id" | "rebuild" | "tenant"> & Partial<RunRecord>): void {
    const detail = queryKeys.runs.detail(run.id);
    if (this.client.getQueryData<RunDetail>(detail)) {
      this.client.setQueryData<RunDetail>(detail, (old) => (old ? { ...old, ...run } : old));
      this.rereadIfInFlight(detail);
    }
    let shown = false;
    for (const [key, page] of this.client.getQueriesData<RunPage>({ queryKey: [...queryKeys.runs.all(), "list"] })) {
      if (!page) continue;
      if (page.runs.some((r) => r.id === run.id)) {
        shown = true;
        this.client.setQueryData<RunPage>(key, {
          ...page,
          runs: page.runs.map((r) => (r.id === run.id ? { ...r, ...run } : r)),
        });
        this.rereadIfInFlight(key);
      } else if (matches(key[3] as RunsFilter & { jobId?: string }, run)) {
        this.invalidateSoon(key); // a new run for this list: re-read the page (order, cursor)
      }
    }
    // A Runs page still mounting (rendered just before this run existed) re-reads too.
    if (!shown && run.status) this.invalidateSoon([...queryKeys.runs.all(), "list"]);
    // Progress, steps and the like change no list but the run's own: the lists are re-read only
    // when a run began, was deferred or ended (its job moved), or learnt its version.
    if (run.status === undefined && run.version === undefined) return;
    this.invalidateSoon(queryKeys.rebuilds.all());
    this.invalidateSoon(queryKeys.timeline.all());
    this.invalidateSoon(queryKeys.queue.all());
    if (run.status === "skipped") this.invalidateSoon(queryKeys.claims.all()); // consecutive skips
  }

  /**
   * Rewrites every cached claims page. The page's countdowns are relative to when it was
   * fetched; a write makes "now" the new base, so every claim's remaining TTL is moved forward
   * by the time since (and the server time with it) before the change is applied.
   */
  private updateClaimPages(change: (claims: ApiClaim[], serverNow: number) => ApiClaim[]): void {
    const now = Date.now();
    for (const query of this.client.getQueryCache().findAll({ queryKey: queryKeys.claims.all() })) {
      const page = query.state.data as ApiClaimPage | undefined;
      // Only the pages (the trail and the ended list share the prefix).
      if (!page || !Array.isArray(page.claims)) continue;
      this.rereadIfInFlight(query.queryKey);
      const elapsed = Math.max(0, now - query.state.dataUpdatedAt);
      const serverNow = page.serverTime + elapsed;
      const rebased = page.claims.map((c) => ({ ...c, pttlMs: Math.max(0, c.pttlMs - elapsed) }));
      const next: ApiClaimPage = { ...page, serverTime: serverNow, claims: change(rebased, serverNow) };
      // Only the first page takes new claims (of its search, if any); later pages only update or drop theirs.
      const { cursor, q } = (query.queryKey[2] as { cursor: string | null; q?: string } | undefined) ?? {};
      if (cursor !== null) next.claims = next.claims.filter((c) => page.claims.some((p) => p.name === c.name));
      else if (q) next.claims = next.claims.filter((c) => claimNameMatches(c.name, q));
      this.client.setQueryData(query.queryKey, next, { updatedAt: now });
    }
  }

  /**
   * A read of `queryKey` in flight was answered before the event just applied: its answer would
   * put back what the event changed (a released claim reappears, a finished run shows running),
   * and nothing polls while live. Read it again after that one.
   */
  private rereadIfInFlight(queryKey: readonly unknown[]): void {
    if (this.client.getQueryState(queryKey)?.fetchStatus === "fetching") this.invalidateSoon(queryKey);
  }

  private invalidateTrail(name: string): void {
    if (this.client.getQueryData(queryKeys.claims.trail(name))) this.invalidateSoon(queryKeys.claims.trail(name));
    if (this.client.getQueryData(queryKeys.claims.ended())) this.invalidateSoon(queryKeys.claims.ended());
  }

  private invalidateSoon(queryKey: readonly unknown[]): void {
    this.due.set(JSON.stringify(queryKey), queryKey);
    this.timer ??= setTimeout(() => {
      this.timer = undefined;
      const keys = [...this.due.values()];
      this.due.clear();
      for (const key of keys) void this.client.invalidateQueries({ queryKey: key });
    }, COALESCE_MS);
  }
}

function matches(filter: (RunsFilter & { jobId?: string }) | undefined, run: Partial<RunRecord>): boolean {
  if (!filter) return true;
  if (filter.cursor) return false; // older pages do not gain new runs
  if (filter.rebuild && filter.rebuild !== run.rebuild) return false;
  if (filter.q && !run.rebuild?.toLowerCase().includes(filter.q.toLowerCase())) return false;
  if (filter.tenant && filter.tenant !== run.tenant) return false;
  if (filter.status && run.status && filter.status !== run.status) return false;
  if (filter.jobId && filter.jobId !== run.jobId) return false;
  return true;
}
