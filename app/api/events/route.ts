import { route } from "@/lib/api/handler";
import { streamEvents } from "@/lib/api/events";

export const dynamic = "force-dynamic";

/** Server-sent events: what changed (claims, runs, workers, health); see lib/events/sse.ts. */
export const GET = route({ role: "viewer" }, async (context, request) => streamEvents(context, request));
