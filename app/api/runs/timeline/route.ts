import { json, route } from "@/lib/api/handler";
import { readQuery } from "@/lib/api/input";
import { otherMethods } from "@/lib/api/methods";
import { getTimeline, timelineQuery } from "@/lib/api/timeline";

export const dynamic = "force-dynamic";

export const GET = route({ role: "viewer" }, async (context, request) =>
  json(await getTimeline(context, readQuery(request.url, timelineQuery))),
);

export const { POST, PUT, PATCH, DELETE, OPTIONS } = otherMethods({ GET });
