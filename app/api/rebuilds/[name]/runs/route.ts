import { actorOf, json, route } from "@/lib/api/handler";
import { readJsonBody } from "@/lib/api/input";
import { otherMethods } from "@/lib/api/methods";
import { triggerAsOperator, triggerBody } from "@/lib/api/rebuilds";

export const dynamic = "force-dynamic";

/** Rebuild now: 202 {jobId, status: queued|deduplicated}. */
export const POST = route(
  { role: "operator", mutation: "trigger" },
  async (context, request, identity, { params }: { params: Promise<{ name: string }> }) => {
    const { name } = await params;
    const body = await readJsonBody(request, triggerBody);
    return json(await triggerAsOperator(context, name, body, actorOf(identity)), 202);
  },
);

export const { GET, HEAD, PUT, PATCH, DELETE, OPTIONS } = otherMethods({ POST });
