import { json, route } from "@/lib/api/handler";
import { readQuery } from "@/lib/api/input";
import { otherMethods } from "@/lib/api/methods";
import { getRebuildDetailOfQuery, rebuildDetailQuery } from "@/lib/api/rebuilds";

export const dynamic = "force-dynamic";

/** One rebuild: its definition summary and, per tenant, schedule (paused?), claim and recent runs. */
export const GET = route(
  { role: "viewer" },
  async (context, request, _identity, { params }: { params: Promise<{ name: string }> }) => {
    const { name } = await params;
    return json(await getRebuildDetailOfQuery(context, name, readQuery(request.url, rebuildDetailQuery)));
  },
);

export const { POST, PUT, PATCH, DELETE, OPTIONS } = otherMethods({ GET });
