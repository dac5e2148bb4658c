import { getAlerts } from "@/lib/api/alerts";
import { json, route } from "@/lib/api/handler";
import { otherMethods } from "@/lib/api/methods";

export const dynamic = "force-dynamic";

export const GET = route({ role: "viewer" }, async (context) => json(await getAlerts(context)));

export const { POST, PUT, PATCH, DELETE, OPTIONS } = otherMethods({ GET });
