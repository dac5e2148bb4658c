import { json, route } from "@/lib/api/handler";
import { otherMethods } from "@/lib/api/methods";

export const dynamic = "force-dynamic";

export const GET = route({ role: "viewer" }, async (_context, _request, identity) =>
  json({ name: identity!.name, role: identity!.role }),
);

export const { POST, PUT, PATCH, DELETE, OPTIONS } = otherMethods({ GET });
