import { json, route } from "@/lib/api/handler";
import { readQuery } from "@/lib/api/input";
import { otherMethods } from "@/lib/api/methods";
import { getQueue, queueQuery } from "@/lib/api/operations";

export const dynamic = "force-dynamic";

/** Active, waiting, delayed (when and why) and recently failed jobs, optionally of one rebuild/tenant. */
export const GET = route({ role: "viewer" }, async (context, request) =>
  json(await getQueue(context, readQuery(request.url, queueQuery))),
);

export const { POST, PUT, PATCH, DELETE, OPTIONS } = otherMethods({ GET });
