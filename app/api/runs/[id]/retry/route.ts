import { actorOf, json, route } from "@/lib/api/handler";
import { readJsonBody } from "@/lib/api/input";
import { otherMethods } from "@/lib/api/methods";
import { retryAsOperator, retryBody, retryReply } from "@/lib/api/operations";

export const dynamic = "force-dynamic";

/** Retry a failed, aborted or cancelled run (forced, same version): 202 {jobId}; 409 not retryable. Audited. */
export const POST = route(
  { role: "operator", mutation: "retry" },
  async (context, request, identity, { params }: { params: Promise<{ id: string }> }) => {
    const { id } = await params;
    const result = await retryAsOperator(context, id, await readJsonBody(request, retryBody), actorOf(identity));
    const reply = retryReply(result);
    return json(reply.body, reply.status);
  },
);

export const { GET, HEAD, PUT, PATCH, DELETE, OPTIONS } = otherMethods({ POST });
