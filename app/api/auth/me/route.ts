import { json, route } from "@/lib/api/handler";

export const dynamic = "force-dynamic";

export const GET = route({ role: "viewer" }, async (_context, _request, identity) =>
  json({ name: identity!.name, role: identity!.role }),
);
