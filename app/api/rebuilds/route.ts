import { json, route } from "@/lib/api/handler";
import { readQuery } from "@/lib/api/input";
import { otherMethods } from "@/lib/api/methods";
import { getRebuildsPage, rebuildsQuery } from "@/lib/api/rebuilds";

export const dynamic = "force-dynamic";

export const GET = route({ role: "viewer" }, async (context, request) =>
  json(await getRebuildsPage(context, readQuery(request.url, rebuildsQuery))),
);

export const { POST, PUT, PATCH, DELETE, OPTIONS } = otherMethods({ GET });
