import { sendTestNotification, testNotificationBody } from "@/lib/api/alerts";
import { actorOf, json, route } from "@/lib/api/handler";
import { readJsonBody } from "@/lib/api/input";
import { otherMethods } from "@/lib/api/methods";

export const dynamic = "force-dynamic";

/** Queues a test notification to one receiver: 202 queued; 404 unknown receiver; 409 alerts not configured (audited). */
export const POST = route({ role: "operator", mutation: "alert-test" }, async (context, request, identity) => {
  const result = await sendTestNotification(
    context,
    await readJsonBody(request, testNotificationBody),
    actorOf(identity),
  );
  return json(result, 202);
});

export const { GET, HEAD, PUT, PATCH, DELETE, OPTIONS } = otherMethods({ POST });
