import { json, route } from "@/lib/api/handler";
import { readQuery } from "@/lib/api/input";
import { otherMethods } from "@/lib/api/methods";
import { getRuns, runsQuery } from "@/lib/api/runs";

export const dynamic = "force-dynamic";

export const GET = route({ role: "viewer" }, async (context, request) =>
  json(await getRuns(context, readQuery(request.url, runsQuery))),
);

export const { POST, PUT, PATCH, DELETE, OPTIONS } = otherMethods({ GET });
