import { json, route } from "@/lib/api/handler";
import { otherMethods } from "@/lib/api/methods";
import { getRunDetail } from "@/lib/api/runs";

export const dynamic = "force-dynamic";

export const GET = route(
  { role: "viewer" },
  async (context, _request, _identity, { params }: { params: Promise<{ id: string }> }) => {
    const { id } = await params;
    return json(await getRunDetail(context, id));
  },
);

export const { POST, PUT, PATCH, DELETE, OPTIONS } = otherMethods({ GET });
