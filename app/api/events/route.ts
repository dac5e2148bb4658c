import { route } from "@/lib/api/handler";
import { streamEvents } from "@/lib/api/events";
import { otherMethods } from "@/lib/api/methods";

export const dynamic = "force-dynamic";

/** Server-sent events: what changed (claims, runs, workers, health); see lib/events/sse.ts. */
export const GET = route({ role: "viewer" }, async (context, request) => streamEvents(context, request));

export const { POST, PUT, PATCH, DELETE, OPTIONS } = otherMethods({ GET });
