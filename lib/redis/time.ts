/**
 * The one clock for anything compared between processes or hosts (heartbeats, staleness, ages,
 * repair): the Redis server's `TIME`. Local clocks are for local deadlines only.
 */
import type { Redis } from "ioredis";

/** A `TIME` reply ([seconds, microseconds]) in ms. */
export function timeReplyMs(reply: readonly [string, string] | readonly string[]): number {
  return Number(reply[0]) * 1000 + Math.floor(Number(reply[1]) / 1000);
}

/** The server's time in ms (one round trip). */
export async function serverNow(client: Pick<Redis, "time">): Promise<number> {
  return timeReplyMs((await client.time()) as unknown as [string, string]);
}
