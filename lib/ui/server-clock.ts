/**
 * The Redis server's clock as this browser sees it: ages, countdowns and staleness on the
 * dashboard are judged on it (README: "Ages and liveness are judged on the Redis server's clock"),
 * not on the viewer's clock, which may be minutes off (black-box helper-168: a browser 120 s fast
 * saw live workers' last heartbeat "2 min ago"). One offset for the whole page, learnt from the
 * server times the API answers carry (`serverTime`, lib/ui/queries.ts `apiFetch`) and the live
 * stream's `ready` and `ping` events (lib/events/sse.ts); the page's render time is a rough first
 * guess until one of those comes. Browser-side; never imports Redis.
 */

export class ServerClock {
  /** Server time minus browser time (ms). */
  private offset = 0;
  private quality: "none" | "rough" | "measured" = "none";
  private readonly listeners = new Set<() => void>();

  /**
   * A server time read while the browser's clock said `receivedAt` (its answer's arrival: the
   * server read its clock a little before, so the estimate errs by the answer's transit, ms).
   * `rough` (the page's render time, read before the page loaded) counts only until a measured one.
   */
  observe(serverTime: number, receivedAt: number, { rough = false } = {}): void {
    if (!Number.isFinite(serverTime) || serverTime <= 0 || !Number.isFinite(receivedAt)) return;
    if (rough && this.quality === "measured") return;
    const offset = serverTime - receivedAt;
    this.quality = rough ? "rough" : "measured";
    if (offset === this.offset) return;
    this.offset = offset;
    for (const listener of this.listeners) listener();
  }

  /** Server time minus browser time (ms): add to `Date.now()`. */
  offsetMs(): number {
    return this.offset;
  }

  /** The server's time at browser time `browserNow`. */
  serverTimeAt(browserNow: number): number {
    return browserNow + this.offset;
  }

  subscribe(listener: () => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }
}

/** The page's one server clock. */
export const serverClock = new ServerClock();
