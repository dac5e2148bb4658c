/**
 * Sending one transition to one receiver, in the receiver's own format:
 * - Alertmanager: `POST <url>/api/v2/alerts` with `[{labels, annotations, startsAt, endsAt,
 *   generatorURL}]`; a firing alert carries an `endsAt` a few repeat intervals ahead (as Prometheus
 *   does), so Alertmanager resolves it by itself if claimwatch stops re-posting; resolved: `endsAt`
 *   is the resolve time.
 * - Slack (incoming webhook): one message when an alert fires, one when it resolves.
 * - Webhook: JSON with the delivery id; `X-Claimwatch-Signature-256: sha256=<hex HMAC-SHA256 of
 *   the body with the secret>` (as GitHub signs), `X-Claimwatch-Delivery: <id>` (the same on
 *   every retry, so a receiver can drop repeats).
 * Every request has a time limit: a hung receiver costs its own lane, never the evaluation.
 */
import crypto from "node:crypto";
import type { Receiver } from "./config";
import type { AlertTransition, Delivery, FiringAlert } from "./types";

export const SEND_TIMEOUT_MS = 10_000;

export type SendResult = { ok: true } | { ok: false; error: string };

export interface SendOptions {
  env: NodeJS.ProcessEnv;
  /** Firing alerts posted to Alertmanager end this long after the post unless re-posted. */
  firingEndsAfterMs: number;
  now: number;
  timeoutMs?: number;
}

export function alertmanagerAlert(alert: FiringAlert, endsAt: number): Record<string, unknown> {
  const labels: Record<string, string> = {};
  for (const [key, value] of Object.entries(alert.labels)) if (value) labels[key] = value;
  return {
    labels,
    annotations: { ...alert.annotations },
    startsAt: new Date(alert.startsAt).toISOString(),
    endsAt: new Date(endsAt).toISOString(),
    generatorURL: alert.annotations.link,
  };
}

export function slackMessage(transition: AlertTransition, test = false): { text: string } {
  const { alert } = transition;
  const firing = transition.status === "firing";
  const head = test
    ? ":information_source: *TEST* notification from claimwatch"
    : `${firing ? ":rotating_light: *FIRING*" : ":white_check_mark: *RESOLVED*"} [${alert.labels.severity}] ${alert.labels.alertname}`;
  return {
    text: `${head}: ${alert.annotations.summary}\n${alert.annotations.description}\n<${alert.annotations.link}|Open in claimwatch>`,
  };
}

export function webhookBody(delivery: Delivery): string {
  const { transition } = delivery;
  return JSON.stringify({
    version: 1,
    deliveryId: delivery.id,
    receiver: delivery.receiver,
    test: Boolean(delivery.test),
    status: transition.status,
    alert: {
      id: transition.alert.id,
      labels: transition.alert.labels,
      annotations: transition.alert.annotations,
      startsAt: new Date(transition.alert.startsAt).toISOString(),
      endsAt: transition.endsAt === null ? null : new Date(transition.endsAt).toISOString(),
    },
    at: new Date(transition.at).toISOString(),
  });
}

export function signBody(body: string, secret: string): string {
  return `sha256=${crypto.createHmac("sha256", secret).update(body).digest("hex")}`;
}

export async function sendDelivery(receiver: Receiver, delivery: Delivery, options: SendOptions): Promise<SendResult> {
  const { transition } = delivery;
  switch (receiver.kind) {
    case "alertmanager": {
      const endsAt = transition.status === "resolved" ? transition.endsAt! : options.now + options.firingEndsAfterMs;
      return postAlertmanager(receiver.url, [alertmanagerAlert(transition.alert, endsAt)], options.timeoutMs);
    }
    case "slack": {
      const url = options.env[receiver.webhookUrlEnv];
      if (!url) return { ok: false, error: `${receiver.webhookUrlEnv} is not set in the environment of this process` };
      return post(url, JSON.stringify(slackMessage(transition, delivery.test)), {}, options.timeoutMs);
    }
    case "webhook": {
      const secret = options.env[receiver.secretEnv];
      if (!secret) return { ok: false, error: `${receiver.secretEnv} is not set in the environment of this process` };
      const body = webhookBody(delivery);
      return post(
        receiver.url,
        body,
        { "x-claimwatch-signature-256": signBody(body, secret), "x-claimwatch-delivery": delivery.id },
        options.timeoutMs,
      );
    }
  }
}

export function postAlertmanager(base: string, alerts: unknown[], timeoutMs?: number): Promise<SendResult> {
  return post(new URL("/api/v2/alerts", base).toString(), JSON.stringify(alerts), {}, timeoutMs);
}

async function post(
  url: string,
  body: string,
  headers: Record<string, string>,
  timeoutMs = SEND_TIMEOUT_MS,
): Promise<SendResult> {
  try {
    const response = await fetch(url, {
      method: "POST",
      headers: { "content-type": "application/json", "user-agent": "claimwatch", ...headers },
      body,
      signal: AbortSignal.timeout(timeoutMs),
      redirect: "manual",
    });
    const text = await response.text().catch(() => "");
    if (response.ok) return { ok: true };
    return { ok: false, error: `HTTP ${response.status}${text ? `: ${text.slice(0, 200).replace(/\s+/g, " ")}` : ""}` };
  } catch (error) {
    const cause = (error as { cause?: { code?: string; message?: string } }).cause;
    const reason =
      error instanceof DOMException && error.name === "TimeoutError"
        ? `no answer within ${timeoutMs} ms`
        : (cause?.code ?? cause?.message ?? (error as Error).message);
    return { ok: false, error: reason };
  }
}
