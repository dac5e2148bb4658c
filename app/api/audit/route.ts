import { auditQuery, getAudit } from "@/lib/api/audit";
import { json, route } from "@/lib/api/handler";
import { readQuery } from "@/lib/api/input";
import { otherMethods } from "@/lib/api/methods";

export const dynamic = "force-dynamic";

export const GET = route({ role: "viewer" }, async (context, request) =>
  json(await getAudit(context, readQuery(request.url, auditQuery))),
);

export const { POST, PUT, PATCH, DELETE, OPTIONS } = otherMethods({ GET });
