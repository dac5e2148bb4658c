import { actorOf, json, route } from "@/lib/api/handler";
import { readJsonBody } from "@/lib/api/input";
import { otherMethods } from "@/lib/api/methods";
import { cancelAsOperator, cancelBody, cancelReply } from "@/lib/api/operations";

export const dynamic = "force-dynamic";

/**
 * Cancel a job: 200 removed (it was waiting; its run is recorded cancelled), 202 cancelling (it
 * runs; its worker stops it), 409 finished or a schedule's next tick, 404 unknown. Audited.
 */
export const POST = route(
  { role: "operator", mutation: "cancel" },
  async (context, request, identity, { params }: { params: Promise<{ id: string }> }) => {
    const { id } = await params;
    const result = await cancelAsOperator(context, id, await readJsonBody(request, cancelBody), actorOf(identity));
    const reply = cancelReply(result);
    return json(reply.body, reply.status);
  },
);

export const { GET, HEAD, PUT, PATCH, DELETE, OPTIONS } = otherMethods({ POST });
