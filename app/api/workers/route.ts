import { json, route } from "@/lib/api/handler";
import { getWorkers } from "@/lib/api/workers";

export const dynamic = "force-dynamic";

export const GET = route({ role: "viewer" }, async (context) => json(await getWorkers(context)));
