import { actorOf, json, route } from "@/lib/api/handler";
import { readJsonBody } from "@/lib/api/input";
import { otherMethods } from "@/lib/api/methods";
import { changeScheduleAsOperator, scheduleActionOf, scheduleBody } from "@/lib/api/operations";

export const dynamic = "force-dynamic";

/**
 * Pause or resume a rebuild's schedule ({action, tenant?, reason}; without a tenant, every
 * tenant's): 200 with what each scheduler did. Audited.
 */
export const POST = route(
  { role: "operator", mutation: scheduleActionOf },
  async (context, request, identity, { params }: { params: Promise<{ name: string }> }) => {
    const { name } = await params;
    const body = await readJsonBody(request, scheduleBody);
    return json(await changeScheduleAsOperator(context, name, body, actorOf(identity)));
  },
);

export const { GET, HEAD, PUT, PATCH, DELETE, OPTIONS } = otherMethods({ POST });
