import path from "node:path";
import { z } from "zod";
import { appendAudit } from "../audit";
import { readAlertsView, type AlertsView } from "../alerts/read";
import { publicOriginOf } from "../alerts/start";
import { queueTestNotification } from "../alerts/test-notification";
import type { WebContext } from "../web/context";
import { ApiError, notFound } from "./errors";
import { reasonText } from "./input";

export function getAlerts(context: WebContext): Promise<AlertsView> {
  const { connections, definitions } = context;
  return readAlertsView(connections.main, connections.claims, connections.keys, definitions.alerts);
}

export const testNotificationBody = z.strictObject({
  receiver: z.string().min(1, "must name a receiver").max(64, "must be at most 64 characters"),
  reason: reasonText().default(""),
});

/**
 * Queues a test notification and audits it. An unknown receiver (404) or no `alerts:` section
 * (409) is thrown as an ApiError, which the route wrapper answers and audits as refused.
 */
export async function sendTestNotification(
  context: WebContext,
  body: z.output<typeof testNotificationBody>,
  actor: string,
): Promise<{ status: "queued"; deliveryId: string; receiver: string }> {
  const { connections, definitions, config } = context;
  const result = await queueTestNotification(
    connections.main,
    connections.keys,
    definitions.alerts,
    body.receiver,
    actor,
    publicOriginOf(config),
  );
  if (result.status === "not-configured") {
    throw new ApiError(
      409,
      "not-configured",
      `alerts are not configured: ${path.basename(config.definitionsPath)} has no alerts: section`,
    );
  }
  if (result.status === "unknown-receiver") {
    throw notFound(
      `receiver: no receiver named ${JSON.stringify(body.receiver)} (configured: ${result.receivers.join(", ") || "none"})`,
    );
  }
  await appendAudit(connections.main, connections.keys, {
    actor,
    action: "alert-test",
    reason: body.reason || "test notification",
    result: "done",
    detail: { receiver: result.receiver, deliveryId: result.deliveryId },
  });
  return result;
}
