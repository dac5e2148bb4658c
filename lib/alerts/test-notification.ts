/**
 * A test notification, asked for by an operator on the Alerts page: queued in the outbox like any
 * delivery, so the evaluating process sends it (with its retries) and the request never waits on
 * a receiver. To Alertmanager it is a firing alert `ClaimwatchTest` that ends after a minute.
 */
import crypto from "node:crypto";
import type { Redis } from "ioredis";
import type { RedisKeys } from "../redis/keys";
import { receiversOf, type AlertsConfig } from "./config";
import type { AlertTransition, Delivery } from "./types";

export type TestNotificationResult =
  | { status: "queued"; deliveryId: string; receiver: string }
  | { status: "unknown-receiver"; receivers: string[] }
  | { status: "not-configured" };

export async function queueTestNotification(
  main: Pick<Redis, "multi" | "time">,
  keys: RedisKeys,
  config: AlertsConfig | undefined,
  receiverName: string,
  requestedBy: string,
  publicOrigin: string,
): Promise<TestNotificationResult> {
  if (!config) return { status: "not-configured" };
  const receivers = receiversOf(config);
  const receiver = receivers.find((r) => r.name === receiverName);
  if (!receiver) return { status: "unknown-receiver", receivers: receivers.map((r) => r.name) };
  const [seconds, micros] = await main.time();
  const now = Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
  const transition: AlertTransition = {
    id: crypto.randomUUID(),
    status: "firing",
    at: now,
    endsAt: now + 60_000,
    alert: {
      id: "test",
      labels: {
        alertname: "ClaimwatchTest" as never,
        severity: "info",
        rebuild: "",
        tenant: "",
        claim: "",
        service: "claimwatch",
      },
      annotations: {
        summary: `Test notification to ${receiver.name}`,
        description: `Sent from the Alerts page by ${requestedBy}. Nothing is wrong.`,
        link: `${publicOrigin}/alerts`,
      },
      startsAt: now,
    },
  };
  const delivery: Delivery = {
    id: `${transition.id}.${receiver.name}`,
    receiver: receiver.name,
    transition: { ...transition, status: receiver.kind === "alertmanager" ? "resolved" : "firing" },
    attempts: 0,
    nextAt: now,
    createdAt: now,
    lastError: null,
    test: true,
  };
  // To Alertmanager the test goes as an alert ending in a minute (sent as "resolved" with endsAt).
  await main
    .multi()
    .hset(keys.alertsDeliveries, delivery.id, JSON.stringify(delivery))
    .zadd(keys.alertsOutbox, now, delivery.id)
    .exec();
  return { status: "queued", deliveryId: delivery.id, receiver: receiver.name };
}
