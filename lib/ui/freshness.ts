/**
 * Whether what a page shows is current, and so may be acted on (black-box helper-168: with the web
 * server hung, the Claims page counted a healthy claim's TTL to 0, called it "Stale — no refresh
 * for 33 s" and offered Force release). Browser-side; pure.
 */

/** While the stream is down, a read this old or newer is current (the page polls every 2 s). */
export const READ_CURRENT_MS = 5_000;

export type Freshness =
  | { current: true }
  /** `readAt`: the last successful read (browser clock); `cause`: why nothing newer came. */
  | { current: false; readAt: number; cause: "connection" | "redis" };

export function pageFreshness({
  live,
  redisDown,
  readAt,
  now,
}: {
  /** The live stream is up and heard from (components/live-events). */
  live: boolean;
  /** The server says a Redis does not answer. */
  redisDown: boolean;
  /** When the page's data was last read or updated by an event (browser clock). */
  readAt: number;
  /** The browser's clock. */
  now: number;
}): Freshness {
  if (redisDown) return { current: false, readAt, cause: "redis" };
  if (live || now - readAt <= READ_CURRENT_MS) return { current: true };
  return { current: false, readAt, cause: "connection" };
}

/** The page's words for data that is not current: `not refreshed for 40 s: …`. */
export function notCurrentText(freshness: Exclude<Freshness, { current: true }>, now: number): string {
  const seconds = Math.max(0, Math.floor((now - freshness.readAt) / 1000));
  return `not refreshed for ${seconds} s: ${
    freshness.cause === "redis" ? "Redis does not answer the dashboard" : "the dashboard lost its connection"
  }`;
}

/**
 * The latest time (browser clock) up to which the page knows of every refresh: the last read, or
 * while live the last thing the stream said (its ping every 5 s). A claim judged stale by counting
 * on the page is judged at this moment, not at `now`: past it, a refresh may have come unheard.
 */
export function knownUpTo({ live, heardAt, readAt }: { live: boolean; heardAt: number; readAt: number }): number {
  return live ? Math.max(heardAt, readAt) : readAt;
}
