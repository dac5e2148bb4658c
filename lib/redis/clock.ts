/**
 * This process's estimate of the Redis clock (lib/redis/time.ts: the one clock for anything
 * compared between processes): Redis time at a monotonic moment (`performance.now()`) plus the
 * monotonic time since, so steps of the host's clock do not move it. Answers come from the
 * worker's heartbeat (every beat) or `syncProcessClock` (web server, CLI). The server read its
 * clock somewhere between the send and the answer (monotonic times of this process): an answer
 * inside that window says the estimate is right and changes nothing; one outside moves the
 * estimate to the window's nearest edge, the least change it proves. So an answer that waited
 * long (queued through an outage, or read after this process was paused) moves nothing it cannot
 * prove. The first answer is taken as read `MAX_SAMPLE_RTT_MS / 2` before it came at most (a
 * command queued through an outage is read when Redis is back, just before it answers). Before
 * the first answer the estimate is the host clock.
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
 * Once it is the process clock, it never steps back: an answer that puts it ahead (a Redis clock
 * that went back: a failover to a host behind) is slewed in, `Date.now` running at 9/10 speed
 * until the estimate catches up. BullMQ renews job locks by `Date.now` differences: its
 * quarter-lock renewals then come at most 1/9 later, inside the step warden's margin
 * (steps/warden.ts). Only a gap over `MAX_SLEW_MS` is stepped back at once: slewing it would
 * leave this process that far ahead of the others for ten times as long, running their delayed
 * jobs early (a job lock may lapse then: the claim and the fence keep a repeat harmless).
 * Forward, it steps at once.
 */
import type { Redis } from "ioredis";
import { timeReplyMs } from "./time";

/** The host's clock, whatever `Date.now` becomes. */
export const hostNow: () => number = Date.now;

/** The first answer is taken as read at most half this before it came. */
export const MAX_SAMPLE_RTT_MS = 250;
/** How fast the process clock slews back to the estimate: this much of the time passing. */
export const SLEW_RATE = 0.1;
/** A larger gap back is stepped at once. */
export const MAX_SLEW_MS = 10_000;

/** Redis ms at monotonic ms `anchorMono`. */
let anchorRedis = 0;
let anchorMono = 0;
/** How far the process clock is ahead of the estimate (being slewed in), and since when. */
let behindMs = 0;
let slewedAt = 0;
let learned = false;
let installed = false;
let waiters: (() => void)[] = [];

/** The estimate at monotonic `mono`, without the slew. */
function estimateAt(mono: number): number {
  return anchorRedis + (mono - anchorMono);
}

/** The process clock at monotonic `mono`: the estimate, plus what is still being slewed in. */
function shownAt(mono: number): number {
  if (behindMs > 0) {
    behindMs = Math.max(0, behindMs - (mono - slewedAt) * SLEW_RATE);
    slewedAt = mono;
  }
  return estimateAt(mono) + behindMs;
}

export const redisClock = {
  /**
   * Learns from one answer: the server's `serverMs`, asked at `sentAt` and answered at
   * `answeredAt` (`performance.now()` ms). True when it moved the estimate (or was the first).
   */
  learn(serverMs: number, sentAt: number, answeredAt: number): boolean {
    const rtt = answeredAt - sentAt;
    if (!Number.isFinite(serverMs) || rtt < 0) return false;
    const mono = performance.now();
    if (!learned) {
      anchorRedis = serverMs;
      anchorMono = answeredAt - Math.min(rtt, MAX_SAMPLE_RTT_MS) / 2;
      learned = true;
      return true;
    }
    // Read no earlier than the send and no later than the answer: the least move it proves.
    let at: number;
    if (serverMs > estimateAt(answeredAt)) at = answeredAt;
    else if (serverMs < estimateAt(sentAt)) at = sentAt;
    else return false;
    const shown = shownAt(mono);
    anchorRedis = serverMs;
    anchorMono = at;
    const ahead = shown - estimateAt(mono);
    // While it is the process clock, what it has shown stands: the estimate catches up with it.
    behindMs = installed && ahead > 0 && ahead <= MAX_SLEW_MS ? ahead : 0;
    slewedAt = mono;
    return true;
  },
  /** Whether an answer was learned yet. */
  learned(): boolean {
    return learned;
  },
  /** Now, on the Redis clock as far as this process knows it (ms); the host clock before the first answer. */
  now(): number {
    return learned ? Math.round(shownAt(performance.now())) : hostNow();
  },
  /** A host time (ms, `hostNow`) on the Redis clock. */
  fromLocal(localMs: number): number {
    return localMs + (redisClock.now() - hostNow());
  },
  /** Whether `Date.now` is this clock in this process. */
  isProcessClock(): boolean {
    return installed;
  },
};

/** One `TIME` round trip, learned (true: it moved the estimate, or was the first). */
export async function measureRedisClock(client: Pick<Redis, "time">): Promise<boolean> {
  const sentAt = performance.now();
  const reply = (await client.time()) as unknown as [string, string];
  return redisClock.learn(timeReplyMs(reply), sentAt, performance.now());
}

/**
 * Makes `Date.now` the Redis clock in this whole process (BullMQ's times included). Call once an
 * answer is learned and before BullMQ runs here; later answers keep it. (A web server whose Redis
 * did not answer at first switches later: its clock may step once then, back too. It renews no
 * job locks: it runs no BullMQ worker.)
 */
export function useAsProcessClock(): void {
  if (installed) return;
  installed = true;
  Date.now = redisClock.now;
  for (const wake of waiters) wake();
  waiters = [];
}

/**
 * For a process without a heartbeat (web server, CLI): measures the Redis clock, makes it the
 * process clock at the first answer, and measures again every `everyMs` (every second until the
 * first answer; unref'd). `ready()` resolves once it is the process clock, or after `withinMs`
 * without an answer (a Redis that does not answer: the host clock meanwhile); `stop()` ends it.
 */
export function syncProcessClock(
  client: Pick<Redis, "time">,
  { withinMs = 2_000, everyMs = 30_000 }: { withinMs?: number; everyMs?: number } = {},
): { ready(): Promise<void>; stop(): void } {
  let timer: NodeJS.Timeout | undefined;
  let stopped = false;
  const measure = async () => {
    if (stopped) return;
    await measureRedisClock(client).catch(() => false);
    if (redisClock.learned()) useAsProcessClock();
    if (stopped) return;
    timer = setTimeout(() => void measure(), installed ? everyMs : 1_000);
    timer.unref?.();
  };
  void measure();
  return {
    ready: () =>
      installed
        ? Promise.resolve()
        : new Promise<void>((resolve) => {
            waiters.push(resolve);
            setTimeout(() => {
              waiters = waiters.filter((waiter) => waiter !== resolve);
              resolve();
            }, withinMs).unref?.();
          }),
    stop: () => {
      stopped = true;
      clearTimeout(timer);
    },
  };
}
