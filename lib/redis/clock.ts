/**
 * This process's estimate of the Redis clock (lib/redis/time.ts: the one clock for anything
 * compared between processes), for times it writes without asking Redis each time (a step's
 * start and end in its run record): the local clock plus the offset the last heartbeat measured
 * (the server's time of the beat against the middle of its round trip). Before the first beat
 * the offset is 0: the local clock.
 */
let offsetMs = 0;
let learned = false;

export const redisClock = {
  /** Learns the offset from one answer: the server's `serverMs`, asked at `sentAt`, answered at `answeredAt` (local ms). */
  learn(serverMs: number, sentAt: number, answeredAt: number): void {
    if (!Number.isFinite(serverMs) || answeredAt < sentAt) return;
    offsetMs = Math.round(serverMs - (sentAt + answeredAt) / 2);
    learned = true;
  },
  /** Whether an offset was measured yet. */
  learned(): boolean {
    return learned;
  },
  /** Now, on the Redis clock as far as this process knows it (ms). */
  now(): number {
    return Date.now() + offsetMs;
  },
  /** A local time (ms) on the Redis clock. */
  fromLocal(localMs: number): number {
    return localMs + offsetMs;
  },
};
