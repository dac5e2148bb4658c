/** `GET /api/events`: the web process's one event hub, streamed to this caller. */
import { authenticateHeaders } from "../auth/guard";
import { EventHub } from "../events/hub";
import { eventStreamResponse, EventsUnavailableError } from "../events/sse";
import { currentHealth } from "../web/health-report";
import type { WebContext } from "../web/context";
import { ApiError } from "./errors";

const holder = globalThis as typeof globalThis & { __claimwatchEvents?: EventHub };

export function eventHub(context: WebContext): EventHub {
  holder.__claimwatchEvents ??= new EventHub({
    urls: context.connections.urls,
    keys: context.connections.keys,
    clients: { main: context.connections.main, claims: context.connections.claims },
    health: () => currentHealth(),
  });
  return holder.__claimwatchEvents;
}

export async function streamEvents(context: WebContext, request: Request): Promise<Response> {
  try {
    return await eventStreamResponse(eventHub(context), request, {
      stillAuthorized: async () =>
        (await authenticateHeaders(context.config, request.headers, context.sessions)) !== null,
    });
  } catch (error) {
    if (error instanceof EventsUnavailableError) throw new ApiError(503, "events-unavailable", error.message);
    throw error;
  }
}
