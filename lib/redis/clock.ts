/**
 * This process's estimate of the Redis clock (lib/redis/time.ts: the one clock for anything
 * compared between processes): the host's clock plus the offset measured from a `TIME` answer
 * (the server's time against the middle of its round trip; the worker's heartbeat measures it at
 * every beat, other processes with `syncProcessClock`). Before the first measure the offset is 0.
 *
 * BullMQ compares times of different processes: a delayed job (a retry's backoff, a deferral, a
 * schedule's next tick) is due when the clock of whichever worker looks is past the time the
 * adding process wrote, and a job scheduler computes its next tick from the clock of the process
 * that runs or upserts it. With host clocks apart, a worker ahead ran every worker's ticks early
 * and broke schedules (the next tick's job id taken already), and a dashboard behind could not
 * resume one. So the processes that drive BullMQ (worker, web server, CLI) make this clock their
 * `Date.now` (`useAsProcessClock`) once it is measured, before BullMQ runs there. Times compared
 * with file times the host stamped (an input's mtime) use `hostNow`.
 *
 * A new measure moves the offset forward at once; backward it is slewed (a tenth of the time
 * passing), so `Date.now` never steps back: BullMQ renews job locks by `Date.now` differences,
 * and a clock stepped back would hold the renewals off for as long.
 */
import type { Redis } from "ioredis";
import { timeReplyMs } from "./time";

/** The host's clock, whatever `Date.now` becomes. */
export const hostNow: () => number = Date.now;

/** How fast a backward correction is slewed: this much of the time passing. */
const SLEW_RATE = 0.1;

let offsetMs = 0;
let targetMs = 0;
let slewedAt = 0;
let learned = false;
let installed = false;

/** The offset now, a backward correction slewed in since the last call. */
function currentOffset(host: number): number {
  if (offsetMs > targetMs) offsetMs = Math.max(targetMs, offsetMs - Math.max(0, host - slewedAt) * SLEW_RATE);
  slewedAt = host;
  return offsetMs;
}

export const redisClock = {
  /** Learns the offset from one answer: the server's `serverMs`, asked at `sentAt`, answered at `answeredAt` (`hostNow` ms). */
  learn(serverMs: number, sentAt: number, answeredAt: number): void {
    if (!Number.isFinite(serverMs) || answeredAt < sentAt) return;
    const measured = Math.round(serverMs - (sentAt + answeredAt) / 2);
    currentOffset(hostNow());
    targetMs = measured;
    // Forward at once; backward at once only while nothing reads it as the process clock.
    if (measured > offsetMs || !installed) offsetMs = measured;
    learned = true;
  },
  /** Whether an offset was measured yet. */
  learned(): boolean {
    return learned;
  },
  /** Now, on the Redis clock as far as this process knows it (ms). */
  now(): number {
    const host = hostNow();
    return host + currentOffset(host);
  },
  /** A host time (ms, `hostNow`) on the Redis clock. */
  fromLocal(localMs: number): number {
    return localMs + offsetMs;
  },
  /** Whether `Date.now` is this clock in this process. */
  isProcessClock(): boolean {
    return installed;
  },
};

/** One `TIME` round trip, learned. */
export async function measureRedisClock(client: Pick<Redis, "time">): Promise<void> {
  const sentAt = hostNow();
  const reply = (await client.time()) as unknown as [string, string];
  redisClock.learn(timeReplyMs(reply), sentAt, hostNow());
}

/**
 * Makes `Date.now` the Redis clock in this whole process (BullMQ's times included). Call once an
 * offset is learned and before BullMQ runs here; later measures keep it.
 */
export function useAsProcessClock(): void {
  if (installed) return;
  installed = true;
  Date.now = redisClock.now;
}

/**
 * For a process without a heartbeat (web server, CLI): measures the Redis clock now (bounded by
 * `withinMs`: a Redis that does not answer leaves the host clock in place until one does), makes
 * it the process clock, and measures again every `everyMs` (unref'd). Resolves when the first
 * measure is in or given up; `stop()` ends the measuring.
 */
export function syncProcessClock(
  client: Pick<Redis, "time">,
  { withinMs = 2_000, everyMs = 30_000 }: { withinMs?: number; everyMs?: number } = {},
): { ready: Promise<void>; stop(): void } {
  const measure = async () => {
    await measureRedisClock(client);
    useAsProcessClock();
  };
  const timer = setInterval(() => void measure().catch(() => {}), everyMs);
  timer.unref?.();
  const ready = Promise.race([
    measure().catch(() => {}),
    new Promise<void>((resolve) => setTimeout(resolve, withinMs).unref?.()),
  ]);
  return { ready, stop: () => clearInterval(timer) };
}
