import { claimsQuery, getClaims } from "@/lib/api/claims";
import { json, route } from "@/lib/api/handler";
import { readQuery } from "@/lib/api/input";
import { otherMethods } from "@/lib/api/methods";

export const dynamic = "force-dynamic";

export const GET = route({ role: "viewer" }, async (context, request) =>
  json(await getClaims(context, readQuery(request.url, claimsQuery))),
);

export const { POST, PUT, PATCH, DELETE, OPTIONS } = otherMethods({ GET });
