import { getAlerts } from "@/lib/api/alerts";
import { json, route } from "@/lib/api/handler";

export const dynamic = "force-dynamic";

export const GET = route({ role: "viewer" }, async (context) => json(await getAlerts(context)));
