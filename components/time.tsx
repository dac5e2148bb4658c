"use client";

import { formatAbsolute, formatRelative, isoOf, type TimeZoneChoice } from "@/lib/ui/format";
import { useHydrated, useServerNow } from "./use-now";

/**
 * A point in time, the one way the dashboard shows it: relative text ("3 min ago") with the
 * absolute time on hover, or (`absolute`) the absolute time with the relative one on hover.
 * `zone="utc"` where the page is about schedules. The viewer's zone is only known in the
 * browser: until hydration, local times are written in UTC (the same on server and client).
 */
export function Time({
  at,
  absolute = false,
  zone = "local",
  now: nowOverride,
}: {
  at: number | null | undefined;
  absolute?: boolean;
  zone?: TimeZoneChoice;
  /** The clock to be relative to: by default the server's (lib/ui/server-clock), as `at` is a server time. */
  now?: number;
}) {
  const hydrated = useHydrated();
  const liveNow = useServerNow();
  if (!at) return <span>–</span>;
  const now = nowOverride ?? liveNow;
  const exact = formatAbsolute(at, hydrated ? zone : "utc");
  const relative = formatRelative(at, now);
  return (
    <time dateTime={isoOf(at)} title={absolute ? relative : exact} data-at={at}>
      {absolute ? exact : relative}
    </time>
  );
}
