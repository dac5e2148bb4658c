import { z } from "zod";
import { appendAudit } from "../audit";
import { readAlertsView, type AlertsView } from "../alerts/read";
import { publicOriginOf } from "../alerts/start";
import { queueTestNotification, type TestNotificationResult } from "../alerts/test-notification";
import type { WebContext } from "../web/context";

export function getAlerts(context: WebContext): Promise<AlertsView> {
  const { connections, definitions } = context;
  return readAlertsView(connections.main, connections.claims, connections.keys, definitions.alerts);
}

export const testNotificationBody = z.strictObject({
  receiver: z.string().min(1, "must name a receiver").max(64, "must be at most 64 characters"),
  reason: z.string().max(500, "must be at most 500 characters").default(""),
});

/** Queues a test notification and audits it (done or refused). */
export async function sendTestNotification(
  context: WebContext,
  body: z.output<typeof testNotificationBody>,
  actor: string,
): Promise<TestNotificationResult> {
  const { connections, definitions, config } = context;
  const result = await queueTestNotification(
    connections.main,
    connections.keys,
    definitions.alerts,
    body.receiver,
    actor,
    publicOriginOf(config),
  );
  await appendAudit(connections.main, connections.keys, {
    actor,
    action: "alert-test",
    reason: body.reason || "test notification",
    result: result.status === "queued" ? "done" : "refused",
    detail: { receiver: body.receiver, ...result },
  });
  return result;
}
