import { json, route } from "@/lib/api/handler";
import { getRebuilds } from "@/lib/api/rebuilds";

export const dynamic = "force-dynamic";

export const GET = route({ role: "viewer" }, async (context) => json({ rebuilds: await getRebuilds(context) }));
