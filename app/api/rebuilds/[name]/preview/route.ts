import { json, route } from "@/lib/api/handler";
import { readQuery } from "@/lib/api/input";
import { otherMethods } from "@/lib/api/methods";
import { previewQuery, previewRun } from "@/lib/api/rebuilds";

export const dynamic = "force-dynamic";

/** What Rebuild now would do at this moment: run, or skip/wait and why. */
export const GET = route(
  { role: "viewer" },
  async (context, request, _identity, { params }: { params: Promise<{ name: string }> }) => {
    const { name } = await params;
    return json(await previewRun(context, name, readQuery(request.url, previewQuery)));
  },
);

export const { POST, PUT, PATCH, DELETE, OPTIONS } = otherMethods({ GET });
