/**
 * What the Alerts page shows: firing alerts, recent transitions, each receiver's last delivery
 * and queue, and which process evaluates. One pipeline per Redis.
 */
import type { Redis } from "ioredis";
import type { RedisKeys } from "../redis/keys";
import { receiversOf, type AlertsConfig, type Receiver } from "./config";
import { EVALUATOR_CLAIM } from "./rules";
import type { AlertTransition, Delivery, FiringAlert, ReceiverStatus } from "./types";

export interface ReceiverView {
  name: string;
  kind: Receiver["kind"];
  /** Where it sends: a URL, or the environment variable holding the secret URL (never the secret). */
  target: string;
  last: ReceiverStatus | null;
  queued: number;
  /** Why the next delivery waits, if one is waiting (the newest error). */
  nextAt: number | null;
  lastError: string | null;
}

export interface AlertsView {
  configured: boolean;
  firing: FiringAlert[];
  transitions: (AlertTransition & { streamId: string })[];
  receivers: ReceiverView[];
  evaluator: { holder: string | null; fence: number | null };
  serverTime: number;
}

const TRANSITIONS_SHOWN = 50;
const OUTBOX_SCANNED = 1_000;

export async function readAlertsView(
  main: Pick<Redis, "pipeline" | "hmget">,
  claims: Pick<Redis, "pipeline">,
  keys: RedisKeys,
  config: AlertsConfig | undefined,
): Promise<AlertsView> {
  const replies =
    (await main
      .pipeline()
      .time()
      .hgetall(keys.alertsFiring)
      .xrevrange(keys.alertsTransitions, "+", "-", "COUNT", TRANSITIONS_SHOWN)
      .hgetall(keys.alertsReceivers)
      .zrange(keys.alertsOutbox, "0", String(OUTBOX_SCANNED - 1))
      .exec()) ?? [];
  const failed = replies.find(([error]) => error);
  if (failed) throw failed[0];
  const [seconds, micros] = replies[0]![1] as [string, string];
  const serverTime = Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
  const firing = Object.values(replies[1]![1] as Record<string, string>)
    .map((json) => parse<FiringAlert>(json))
    .filter((a): a is FiringAlert => a !== null)
    .sort((a, b) => b.startsAt - a.startsAt);
  const transitions = (replies[2]![1] as [string, string[]][])
    .map(([streamId, fields]) => {
      const t = parse<AlertTransition>(fields[1] ?? "");
      return t ? { ...t, streamId } : null;
    })
    .filter((t): t is AlertTransition & { streamId: string } => t !== null);
  const statuses = replies[3]![1] as Record<string, string>;
  const outboxIds = replies[4]![1] as string[];
  const queued = new Map<string, Delivery>();
  const counts = new Map<string, number>();
  if (outboxIds.length > 0) {
    const values = await main.hmget(keys.alertsDeliveries, ...outboxIds);
    for (const json of values) {
      const delivery = json ? parse<Delivery>(json) : null;
      if (!delivery) continue;
      counts.set(delivery.receiver, (counts.get(delivery.receiver) ?? 0) + 1);
      if (!queued.has(delivery.receiver)) queued.set(delivery.receiver, delivery);
    }
  }
  const receivers: ReceiverView[] = (config ? receiversOf(config) : []).map((receiver) => {
    const head = queued.get(receiver.name);
    return {
      name: receiver.name,
      kind: receiver.kind,
      target: receiver.kind === "slack" ? `$${receiver.webhookUrlEnv}` : receiver.url,
      last: statuses[receiver.name] ? parse<ReceiverStatus>(statuses[receiver.name]!) : null,
      queued: counts.get(receiver.name) ?? 0,
      nextAt: head ? head.nextAt : null,
      lastError: head?.lastError ?? null,
    };
  });
  const holder = await claims.pipeline().hmget(keys.claimMeta(EVALUATOR_CLAIM), "holder", "fence").exec();
  const [holderJson, fence] = (holder?.[0]?.[1] ?? [null, null]) as (string | null)[];
  const identity = holderJson ? parse<{ host?: string; pid?: number; workerId?: string }>(holderJson) : null;
  return {
    configured: Boolean(config),
    firing,
    transitions,
    receivers,
    evaluator: {
      holder: identity
        ? `${identity.workerId || "dashboard"} on ${identity.host ?? "?"} (pid ${identity.pid ?? "?"})`
        : null,
      fence: fence ? Number(fence) : null,
    },
    serverTime,
  };
}

function parse<T>(json: string): T | null {
  try {
    return JSON.parse(json) as T;
  } catch {
    return null;
  }
}
