"use client";

import { createContext, createElement, useContext, useEffect, useSyncExternalStore, type ReactNode } from "react";
import { serverClock } from "@/lib/ui/server-clock";

/**
 * The current time for countdowns and "3 s ago", from one shared 250 ms ticker.
 *
 * Server render and hydration both use the time the server rendered the page (RenderTime,
 * set by the dashboard layout), so the HTML the browser hydrates says exactly what the server
 * sent — a `Date.now()` read on each side differed by the page's load time and broke hydration
 * (React error #418 on the Workers page). Right after hydration the live clock takes over.
 */
const RenderTime = createContext<number>(0);

export function RenderTimeProvider({ now, children }: { now: number; children: ReactNode }) {
  // The render time is the server's clock a little before the page arrived: the server clock's
  // first guess, until an answer or the live stream measures it.
  useEffect(() => serverClock.observe(now, Date.now(), { rough: true }), [now]);
  return createElement(RenderTime.Provider, { value: now }, children);
}

const TICK_MS = 250;
let current = 0;
const listeners = new Set<() => void>();
let timer: ReturnType<typeof setInterval> | undefined;

function subscribe(listener: () => void): () => void {
  listeners.add(listener);
  if (!timer) {
    current = Date.now();
    timer = setInterval(() => {
      current = Date.now();
      for (const l of listeners) l();
    }, TICK_MS);
  }
  return () => {
    listeners.delete(listener);
    if (listeners.size === 0 && timer) {
      clearInterval(timer);
      timer = undefined;
    }
  };
}

const snapshot = () => current || Date.now();

export function useNow(): number {
  const renderTime = useContext(RenderTime);
  return useSyncExternalStore(subscribe, snapshot, () => renderTime || snapshot());
}

const subscribeServerClock = (listener: () => void) => serverClock.subscribe(listener);
const serverClockOffset = () => serverClock.offsetMs();

/**
 * `useNow` on the Redis server's clock (lib/ui/server-clock): what every age, countdown and
 * staleness of server times is judged by, so a viewer whose clock is off sees the same ages as
 * everyone else. Server render and hydration: the render time, which is the server's clock.
 */
export function useServerNow(): number {
  const renderTime = useContext(RenderTime);
  const now = useNow();
  const offset = useSyncExternalStore(subscribeServerClock, serverClockOffset, () => 0);
  return useHydrated() ? now + offset : renderTime || now;
}

/** The time the server rendered this page (0 outside the dashboard layout). */
export function useRenderTime(): number {
  return useContext(RenderTime);
}

const noSubscribe = () => () => {};

/** False during server render and hydration, true after: for output that depends on the browser (its time zone). */
export function useHydrated(): boolean {
  return useSyncExternalStore(
    noSubscribe,
    () => true,
    () => false,
  );
}

/**
 * The server's data while this component hydrates, the live data after. Parts of a page hydrate
 * at different moments (Suspense boundaries), and the live stream may update a query in between
 * (a worker's beat, a health report): rendered during hydration, that data no longer matches the
 * server's HTML (React error #418, seen on the Workers page in CI).
 */
export function useServerFirst<T>(live: T | undefined, server: T | null | undefined): T | undefined {
  const hydrated = useHydrated();
  return !hydrated && server ? server : live;
}

/**
 * `useServerFirst` for a whole query result: while the component hydrates, what the server
 * rendered — its data, or no data and no error when it had none (Redis down: the page says so
 * itself) — and the live result after. A query that answered or failed before this part of the
 * page hydrated (the live stream re-reads queries as soon as the layout hydrates) would otherwise
 * render something the server's HTML does not say (React error #418, helper-136: /rebuilds and a
 * run's page, now and then).
 */
export function useServerFirstQuery<T>(
  query: { data: T | undefined; error: Error | null },
  server: NoInfer<T> | null | undefined,
): { data: T | undefined; error: Error | null } {
  const hydrated = useHydrated();
  if (hydrated) return { data: query.data, error: query.error };
  return { data: server ?? undefined, error: null };
}
