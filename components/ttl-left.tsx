"use client";

import { formatDurationMs } from "@/lib/ui/format";
import { useHydrated, useNow } from "./use-now";

/**
 * A claim's TTL left, counting down between reads: the server's PTTL when the page received it
 * (`readAt`, the browser's clock), less the time since. The server's figure until hydrated (the
 * HTML and the hydration must agree).
 */
export function TtlLeft({ pttlMs, readAt }: { pttlMs: number; readAt: number }) {
  const now = useNow();
  const hydrated = useHydrated();
  const left = hydrated && readAt > 0 ? Math.max(0, pttlMs - Math.max(0, now - readAt)) : pttlMs;
  return (
    <span data-field="ttl-left" data-ttl-ms={Math.round(left)}>
      {formatDurationMs(left)}
    </span>
  );
}
