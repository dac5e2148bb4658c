/**
 * `GET /api/events`: the live stream as server-sent events.
 *
 * Wire format: every message is `data: <DeliveredEvent JSON>`; stored events also carry
 * `id: <main>/<claims>` (the resume position). First comes `event: ready` with
 * `{ position, resumed, gap }`: `resumed` when the `Last-Event-ID` (header, or `lastEventId`
 * query for a new EventSource) was honoured and what was missed follows; otherwise (first
 * connection, or `gap`) the client re-reads its data once; `ready` also carries `serverTime` and
 * `heartbeatMs`. Every `heartbeatMs` (5 s) comes `event: ping` with `{ serverTime }` (this process's
 * clock, which is the Redis clock: lib/redis/clock.ts) and the newest health report: they keep
 * proxies and load balancers from closing an idle connection, and they are how the browser knows
 * the stream is alive — an SSE comment never reaches the page's script, so a hung server or a
 * half-open connection looked live forever (black-box helper-168); the page takes a stream silent
 * for 2.5 heartbeats as down. `retry: 1000` asks the browser to reconnect after 1 s. A client too
 * slow to take its events is cut (it resumes).
 */
import type { EventHub, HubMessage, StreamPosition } from "./hub";
import { formatPosition, parsePosition } from "./hub";
import { UNAUTHENTICATED_EVENT } from "./types";

/** How often the stream says it is alive (`event: ping`); the page's watchdog waits 2.5 times this. */
export const HEARTBEAT_EVERY_MS = 5_000;
/** The SSE event that proves the stream alive, with the server's time. */
export const PING_EVENT = "ping";
/** Bytes queued for one slow client before it is cut off (it reconnects and resumes). */
const MAX_BUFFERED = 1_000_000;
const START_TIMEOUT_MS = 3_000;

export const SSE_HEADERS: Record<string, string> = {
  "content-type": "text/event-stream; charset=utf-8",
  "cache-control": "no-cache, no-transform",
  connection: "keep-alive",
  // nginx: do not buffer this response (see the README's proxy settings).
  "x-accel-buffering": "no",
};

export class EventsUnavailableError extends Error {
  constructor() {
    super("the event streams cannot be read now (Redis unreachable); the dashboard polls meanwhile");
    this.name = "EventsUnavailableError";
  }
}

function frame(message: HubMessage): string {
  return `${message.id ? `id: ${message.id}\n` : ""}data: ${JSON.stringify(message.event)}\n\n`;
}

/** Throws `EventsUnavailableError` when the hub cannot start (the route answers 503). */
export async function eventStreamResponse(
  hub: EventHub,
  request: Request,
  {
    stillAuthorized,
  }: {
    /**
     * Asked at every heartbeat: false (a logout revoked the session, or it expired) ends the
     * stream with an `unauthenticated` event, so a logged-out page stops receiving changes.
     */
    stillAuthorized?: () => Promise<boolean>;
  } = {},
): Promise<Response> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  try {
    await Promise.race([
      hub.start(),
      new Promise((_, reject) => {
        timer = setTimeout(() => reject(new EventsUnavailableError()), START_TIMEOUT_MS);
      }),
    ]);
  } catch {
    throw new EventsUnavailableError();
  } finally {
    clearTimeout(timer);
  }
  const url = new URL(request.url);
  const resumeFrom = parsePosition(request.headers.get("last-event-id") ?? url.searchParams.get("lastEventId"));
  const encoder = new TextEncoder();
  let cleanup = () => {};

  const body = new ReadableStream<Uint8Array>({
    start: async (controller) => {
      let closed = false;
      const send = (text: string) => {
        if (closed) return;
        if ((controller.desiredSize ?? 0) < -MAX_BUFFERED) {
          cleanup();
          controller.close();
          return;
        }
        try {
          controller.enqueue(encoder.encode(text));
        } catch {
          cleanup();
        }
      };
      // Live events are held back until the backlog is out, so the order is kept.
      let pending: HubMessage[] | null = [];
      const subscription = hub.subscribe((message) => {
        if (pending) pending.push(message);
        else send(frame(message));
      });
      // The heartbeat: a ping, and the newest health report (the page keeps the newer one).
      const heartbeat = setInterval(() => {
        // First, so that a Redis that does not answer the session check below does not silence
        // the stream: the ping says the web server is alive; the health report says Redis is not.
        const health = hub.latestHealth;
        send(`event: ${PING_EVENT}\ndata: ${JSON.stringify({ serverTime: Date.now() })}\n\n`);
        if (health) send(frame({ id: null, event: { type: "health", report: health, at: Date.now() } }));
        void (async () => {
          // An answer that fails (Redis down) keeps the stream: the page shows that state itself.
          if (stillAuthorized && !(await stillAuthorized().catch(() => true))) {
            send(`event: ${UNAUTHENTICATED_EVENT}\ndata: {}\n\n`);
            cleanup();
            try {
              controller.close();
            } catch {
              // already closed
            }
          }
        })();
      }, HEARTBEAT_EVERY_MS);
      cleanup = () => {
        if (closed) return;
        closed = true;
        clearInterval(heartbeat);
        subscription.unsubscribe();
      };
      request.signal.addEventListener("abort", () => {
        cleanup();
        try {
          controller.close();
        } catch {
          // already closed
        }
      });

      send("retry: 1000\n\n");
      const position: StreamPosition = subscription.position;
      let resumed = false;
      let gap = false;
      let backlog: HubMessage[] = [];
      if (resumeFrom) {
        try {
          const result = await hub.backlog(resumeFrom, position);
          gap = result.gap;
          backlog = result.messages;
          resumed = !gap;
        } catch {
          gap = true;
        }
      }
      // The ready event's id is where this client stands: the backlog that follows moves it on
      // (a cut in the middle of the backlog resumes from the last event the client got).
      const standing = formatPosition(resumed && resumeFrom ? resumeFrom : position);
      const ready = {
        position: standing,
        resumed,
        gap,
        live: hub.live,
        serverTime: Date.now(),
        heartbeatMs: HEARTBEAT_EVERY_MS,
      };
      send(`event: ready\nid: ${standing}\ndata: ${JSON.stringify(ready)}\n\n`);
      for (const message of backlog) send(frame(message));
      const health = hub.latestHealth;
      if (health) send(frame({ id: null, event: { type: "health", report: health, at: Date.now() } }));
      for (const message of pending ?? []) send(frame(message));
      pending = null;
    },
    cancel: () => cleanup(),
  });
  return new Response(body, { status: 200, headers: SSE_HEADERS });
}
