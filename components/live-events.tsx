"use client";

import { useQuery, useQueryClient } from "@tanstack/react-query";
import { createContext, useContext, useEffect, useRef, useState, type ReactNode } from "react";
import { UNAUTHENTICATED_EVENT, type DeliveredEvent } from "@/lib/events/types";
import { LiveCache } from "@/lib/ui/live-cache";
import { healthQuery } from "@/lib/ui/queries";
import { serverClock } from "@/lib/ui/server-clock";

type LiveState = "connecting" | "live" | "offline";

const LiveContext = createContext<LiveState>("connecting");
/** When (browser clock) the stream last said anything (an event, a ping); 0: never. */
const HeardContext = createContext<number>(0);

/** The stream's heartbeat when `ready` does not say it (lib/events/sse.ts HEARTBEAT_EVERY_MS). */
const DEFAULT_HEARTBEAT_MS = 5_000;
/** A stream silent this many heartbeats is taken as down (a hung server, a half-open connection). */
export const SILENT_HEARTBEATS = 2.5;

/**
 * One EventSource per page (`/api/events`): events update React Query's cache (lib/ui/live-cache).
 * While the stream is down, queries poll (`usePollEvery`) and the header says "not live".
 * EventSource reconnects by itself after a cut, sending the last event id; after a refused
 * connection (503, 401) it gives up, so a new one is opened with `?lastEventId=`, backing off.
 * A stream that says nothing — not even its `ping` — for `SILENT_HEARTBEATS` heartbeats is down
 * too (a hung server or a half-open connection never errors: black-box helper-168): it is closed,
 * the page polls and says so, and a new one is opened.
 */
export function LiveEvents({ children }: { children: ReactNode }) {
  const queryClient = useQueryClient();
  const [state, setState] = useState<LiveState>("connecting");
  const [heardAt, setHeardAt] = useState(0);
  const cache = useRef<LiveCache | null>(null);

  useEffect(() => {
    cache.current ??= new LiveCache(queryClient);
    const live = cache.current;
    let source: EventSource | null = null;
    let retry: ReturnType<typeof setTimeout> | undefined;
    let lastId: string | null = null;
    let failures = 0;
    let stopped = false;
    let wasLive = false;
    let heartbeatMs = DEFAULT_HEARTBEAT_MS;
    let watchdog: ReturnType<typeof setTimeout> | undefined;

    /** The stream said something: it is alive; wait again for the next. */
    const heard = () => {
      setHeardAt(Date.now());
      clearTimeout(watchdog);
      watchdog = setTimeout(silent, SILENT_HEARTBEATS * heartbeatMs);
    };
    /** Nothing for too long: whatever the connection says, nothing reaches this page. */
    const silent = () => {
      if (stopped) return;
      source?.close();
      down();
      failures += 1;
      clearTimeout(retry);
      connect();
    };
    const down = () => {
      setState("offline");
      if (wasLive) {
        wasLive = false;
        live.refreshAll(); // re-read now, then poll until the stream is back
      }
    };
    const connect = () => {
      if (stopped) return;
      source = new EventSource(lastId ? `/api/events?lastEventId=${encodeURIComponent(lastId)}` : "/api/events");
      // A connection that never opens (its request hangs) is silent too.
      clearTimeout(watchdog);
      watchdog = setTimeout(silent, SILENT_HEARTBEATS * heartbeatMs);
      source.addEventListener("ready", (message) => {
        const info = JSON.parse((message as MessageEvent<string>).data) as {
          position: string;
          resumed: boolean;
          serverTime?: number;
          heartbeatMs?: number;
        };
        if (info.serverTime) serverClock.observe(info.serverTime, Date.now());
        if (info.heartbeatMs) heartbeatMs = info.heartbeatMs;
        heard();
        lastId = info.position;
        failures = 0;
        wasLive = true;
        setState("live");
        if (!info.resumed) live.refreshAll();
      });
      source.addEventListener("ping", (message) => {
        const { serverTime } = JSON.parse((message as MessageEvent<string>).data) as { serverTime?: number };
        if (serverTime) serverClock.observe(serverTime, Date.now());
        heard();
      });
      // The session ended (logged out elsewhere, expired): to the login page.
      source.addEventListener(UNAUTHENTICATED_EVENT, () => {
        stopped = true;
        source?.close();
        window.location.assign("/login");
      });
      source.onmessage = (message: MessageEvent<string>) => {
        if (message.lastEventId) lastId = message.lastEventId;
        heard();
        try {
          live.apply(JSON.parse(message.data) as DeliveredEvent);
        } catch {
          // an event this page does not understand: ignore it
        }
      };
      source.onerror = () => {
        down();
        if (source?.readyState === EventSource.CLOSED) {
          source.close();
          failures += 1;
          retry = setTimeout(connect, Math.min(10_000, 500 * 2 ** Math.min(failures, 5)));
        }
      };
    };
    connect();
    return () => {
      stopped = true;
      clearTimeout(retry);
      clearTimeout(watchdog);
      source?.close();
    };
  }, [queryClient]);

  return (
    <LiveContext.Provider value={state}>
      <HeardContext.Provider value={heardAt}>{children}</HeardContext.Provider>
    </LiveContext.Provider>
  );
}

/**
 * Whether the page's data is current: the stream is live and Redis answers (every change reaches
 * the page), and when (browser clock) the stream last said anything — what a judgment made by
 * counting on the page ("no refresh for 25 s") may rely on: past that moment, a refresh the page
 * did not hear of may have happened.
 */
export function useLiveness(): { live: boolean; redisDown: boolean; heardAt: number } {
  const state = useContext(LiveContext);
  const heardAt = useContext(HeardContext);
  const { data: health } = useQuery({ ...healthQuery(), refetchInterval: false });
  const redisDown = health !== undefined && !health.ok;
  return { live: state === "live" && !redisDown, redisDown, heardAt };
}

/** `refetchInterval` for a query: no polling while live updates arrive, `ms` otherwise. */
export function usePollEvery(ms: number): number | false {
  return useContext(LiveContext) === "live" ? false : ms;
}

/**
 * The header's indicator: live, or not (and that the page polls meanwhile). Connected to a server
 * whose Redis does not answer is not live either: no change can reach the page until it is back
 * (the health report, which the banner shows too, says so).
 */
export function LiveStatus() {
  const state = useContext(LiveContext);
  const { data: health } = useQuery({ ...healthQuery(), refetchInterval: false });
  const redisDown = health !== undefined && !health.ok;
  const live = state === "live" && !redisDown;
  const text = live
    ? "Live"
    : state === "live"
      ? "Not live: Redis unreachable"
      : state === "connecting"
        ? "Connecting…"
        : "Not live: polling";
  return (
    <span
      role="status"
      aria-label="Live updates"
      data-live={redisDown && state === "live" ? "redis-down" : state}
      className={`flex items-center gap-1 text-xs ${live ? "text-emerald-700" : "text-amber-800"}`}
      title={
        live
          ? "Changes are pushed to this page as they happen"
          : state === "live"
            ? "Connected, but a Redis does not answer: nothing changes here until it is back (see the banner)"
            : "Live updates are down: refreshing every few seconds"
      }
    >
      <span aria-hidden className={`inline-block h-2 w-2 rounded-full ${live ? "bg-emerald-500" : "bg-amber-500"}`} />
      {text}
    </span>
  );
}
