import { releaseBody, releaseClaimAsOperator } from "@/lib/api/claims";
import { actorOf, json, route } from "@/lib/api/handler";
import { readJsonBody } from "@/lib/api/input";

export const dynamic = "force-dynamic";

/** Owner-checked force release: 200 released; 409 not-owner (changed hands) or missing. */
export const POST = route({ role: "operator", mutation: "force-release" }, async (context, request, identity) => {
  const result = await releaseClaimAsOperator(context, await readJsonBody(request, releaseBody), actorOf(identity));
  return json(result, result.status === "released" ? 200 : 409);
});
