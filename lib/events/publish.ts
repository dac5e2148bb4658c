/**
 * Writing events: one `XADD … MAXLEN ~ N` to the stream in the Redis where the change was made,
 * either written by the script that makes the change (run records, lib/runs/scripts.ts: the
 * record and its event are one atomic write, in the same round trip; likewise a claim's
 * acquire, refresh and release, lib/claims), or queued into the caller's own MULTI, or sent on
 * its own right after the change (a force release's `claim.revoked`, a holder's `claim.lost`,
 * queue and worker events). A lost event never fails the operation it reports: browsers fall
 * back to re-reading (a gap in the stream is detected on resume, see hub.ts).
 */
import type { ChainableCommander, Redis } from "ioredis";
import type { RedisKeys } from "../redis/keys";
import { EVENTS_KEPT } from "../redis/scripts";
import type { StoredEvent } from "./types";

export { EVENTS_KEPT };

export type EventClient = Pick<Redis, "xadd">;

/**
 * Domain functions take narrow client types (`Pick<Redis, "defineCommand">`); a real client
 * can also XADD. A client that cannot (a narrow test double) publishes nothing.
 */
function canPublish(client: unknown): client is EventClient {
  return typeof (client as Partial<EventClient> | null)?.xadd === "function";
}

/** An event as its stream entry's one field `e` holds it (scripts that write events take this). */
export function encodeEvent(event: StoredEvent): string {
  return JSON.stringify(event);
}

function fieldsOf(event: StoredEvent): string[] {
  return ["e", encodeEvent(event)];
}

/** Sends the event; resolves to its stream id, or null when it could not be written (never rejects). */
export async function publishEvent(client: unknown, keys: RedisKeys, event: StoredEvent): Promise<string | null> {
  if (!canPublish(client)) return null;
  try {
    return await client.xadd(keys.events, "MAXLEN", "~", EVENTS_KEPT, "*", ...fieldsOf(event));
  } catch {
    return null;
  }
}

/** Queues the event into `tx` (a MULTI or pipeline the caller executes). */
export function appendEventInto(tx: ChainableCommander, keys: RedisKeys, event: StoredEvent): ChainableCommander {
  return tx.xadd(keys.events, "MAXLEN", "~", EVENTS_KEPT, "*", ...fieldsOf(event));
}

/** Decodes one stream entry's fields (`["e", json]`); null for anything else. */
export function decodeEntry(fields: string[]): StoredEvent | null {
  const at = fields.indexOf("e");
  if (at < 0 || at % 2 !== 0) return null;
  try {
    const event = JSON.parse(fields[at + 1] ?? "") as StoredEvent;
    return typeof event?.type === "string" ? event : null;
  } catch {
    return null;
  }
}
