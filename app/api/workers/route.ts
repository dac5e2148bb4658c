import { json, route } from "@/lib/api/handler";
import { otherMethods } from "@/lib/api/methods";
import { getWorkers } from "@/lib/api/workers";

export const dynamic = "force-dynamic";

export const GET = route({ role: "viewer" }, async (context) => json(await getWorkers(context)));

export const { POST, PUT, PATCH, DELETE, OPTIONS } = otherMethods({ GET });
