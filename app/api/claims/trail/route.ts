import { getClaimTrail, trailQuery } from "@/lib/api/claims";
import { json, route } from "@/lib/api/handler";
import { readQuery } from "@/lib/api/input";

export const dynamic = "force-dynamic";

export const GET = route({ role: "viewer" }, async (context, request) =>
  json(await getClaimTrail(context, readQuery(request.url, trailQuery))),
);
