import { json, route } from "@/lib/api/handler";
import { readQuery } from "@/lib/api/input";
import { getRebuildDetail, rebuildDetailQuery } from "@/lib/api/rebuilds";

export const dynamic = "force-dynamic";

/** One rebuild: its definition summary and, per tenant, schedule (paused?), claim and recent runs. */
export const GET = route(
  { role: "viewer" },
  async (context, request, _identity, { params }: { params: Promise<{ name: string }> }) => {
    const { name } = await params;
    const { tenant } = readQuery(request.url, rebuildDetailQuery);
    return json(await getRebuildDetail(context, name, tenant));
  },
);
