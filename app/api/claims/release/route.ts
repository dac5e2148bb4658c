import { releaseBody, releaseClaimAsOperator, releaseReply } from "@/lib/api/claims";
import { actorOf, json, route } from "@/lib/api/handler";
import { readJsonBody } from "@/lib/api/input";
import { otherMethods } from "@/lib/api/methods";

export const dynamic = "force-dynamic";

/** Owner-checked force release: 200 released; 409 releasing, not-owner (changed hands) or missing. */
export const POST = route({ role: "operator", mutation: "force-release" }, async (context, request, identity) => {
  const body = await readJsonBody(request, releaseBody);
  const reply = releaseReply(body.name, await releaseClaimAsOperator(context, body, actorOf(identity)));
  return json(reply.body, reply.status);
});

export const { GET, HEAD, PUT, PATCH, DELETE, OPTIONS } = otherMethods({ POST });
