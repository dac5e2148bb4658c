/**
 * Deliveries: each transition waits in the outbox (Redis) until its receiver accepts it. One lane
 * per receiver sends the receiver's oldest delivery at a time (Slack sees fire before resolve);
 * a receiver that is down or hangs holds only its own lane, retried with capped exponential
 * backoff; nothing here is awaited by the evaluation, the worker or a request.
 *
 * Only the evaluating process pumps. A delivery in flight when that process dies is sent again
 * by the next one, with the same delivery id (at least once; webhook receivers can drop repeats).
 */
import type { Redis } from "ioredis";
import type { RedisKeys } from "../redis/keys";
import type { AlertsConfig, Receiver } from "./config";
import { alertmanagerAlert, postAlertmanager, sendDelivery, type SendResult } from "./receivers";
import { redisTime } from "./snapshot";
import type { Delivery, FiringAlert, ReceiverStatus } from "./types";

export const BACKOFF_BASE_MS = 1_000;
export const BACKOFF_CAP_MS = 5 * 60_000;
/** A delivery older than this is dropped (and the receiver's status says so). */
export const DELIVERY_MAX_AGE_MS = 24 * 3_600_000;
/** Deliveries looked at per pump (oldest first); bounds the work while a receiver is down. */
const OUTBOX_WINDOW = 500;

export function backoffMs(attempts: number): number {
  return Math.min(BACKOFF_CAP_MS, BACKOFF_BASE_MS * 2 ** Math.max(0, attempts - 1));
}

type Client = Pick<Redis, "pipeline" | "multi" | "time" | "zrange" | "hmget" | "hgetall" | "hset">;

export class OutboxPump {
  private readonly busy = new Set<string>();
  private readonly lastRepost = new Map<string, number>();
  private readonly inFlight = new Set<Promise<void>>();

  constructor(
    private readonly main: Client,
    private readonly keys: RedisKeys,
    private readonly receivers: readonly Receiver[],
    private readonly config: Pick<AlertsConfig, "repeatEvery">,
    private readonly env: NodeJS.ProcessEnv,
    private readonly log: (line: string) => void,
  ) {}

  private pumping: Promise<void> | null = null;
  private pumpAgain = false;

  /**
   * Starts what is due; returns once the sends are started (they run in the background). Calls
   * never overlap: a pump that read the outbox before a send finished could send it again.
   */
  async pump(stillLeading: () => boolean): Promise<void> {
    if (this.pumping) {
      this.pumpAgain = true;
      return this.pumping;
    }
    this.pumping = (async () => {
      do {
        this.pumpAgain = false;
        await this.pumpOnce(stillLeading);
      } while (this.pumpAgain);
    })().finally(() => (this.pumping = null));
    return this.pumping;
  }

  /** Deliveries whose send ended since this pump read the outbox: its copy of them is stale. */
  private readonly endedSinceRead = new Set<string>();

  private async pumpOnce(stillLeading: () => boolean): Promise<void> {
    if (!stillLeading()) return;
    this.endedSinceRead.clear();
    const now = await redisTime(this.main);
    const ids = await this.main.zrange(this.keys.alertsOutbox, "0", String(OUTBOX_WINDOW - 1));
    const heads = new Map<string, Delivery>();
    const queued = new Map<string, number>();
    const orphans: string[] = [];
    if (ids.length > 0) {
      const values = await this.main.hmget(this.keys.alertsDeliveries, ...ids);
      ids.forEach((id, i) => {
        const json = values[i];
        if (!json) return orphans.push(id);
        const delivery = JSON.parse(json) as Delivery;
        queued.set(delivery.receiver, (queued.get(delivery.receiver) ?? 0) + 1);
        if (!heads.has(delivery.receiver)) heads.set(delivery.receiver, delivery);
      });
    }
    if (orphans.length > 0)
      await this.main
        .multi()
        .zrem(this.keys.alertsOutbox, ...orphans)
        .exec();
    for (const [name, delivery] of heads) {
      const receiver = this.receivers.find((r) => r.name === name);
      if (!receiver) {
        // The receiver was removed from the configuration: its deliveries can never be sent.
        await this.finish(delivery, { ok: false, error: "receiver no longer configured" }, now, true);
        continue;
      }
      if (this.busy.has(name) || this.endedSinceRead.has(delivery.id) || delivery.nextAt > now || !stillLeading()) {
        continue;
      }
      this.run(name, () => this.deliver(receiver, delivery, now));
    }
    // Alertmanager forgets alerts that are not re-sent: re-post the firing ones on an idle lane.
    for (const receiver of this.receivers) {
      if (receiver.kind !== "alertmanager" || this.busy.has(receiver.name) || queued.has(receiver.name)) continue;
      if (now - (this.lastRepost.get(receiver.name) ?? 0) < this.config.repeatEvery || !stillLeading()) continue;
      this.lastRepost.set(receiver.name, now);
      this.run(receiver.name, () => this.repost(receiver, now));
    }
  }

  /** Waits for the sends in flight (tests, shutdown). */
  async settled(): Promise<void> {
    while (this.inFlight.size > 0) await Promise.allSettled([...this.inFlight]);
  }

  private run(lane: string, work: () => Promise<void>): void {
    this.busy.add(lane);
    const task = work()
      .catch((error: unknown) => this.log(`alerts: delivery to ${lane} failed to record: ${String(error)}`))
      .finally(() => {
        this.busy.delete(lane);
        this.inFlight.delete(task);
      });
    this.inFlight.add(task);
  }

  private async deliver(receiver: Receiver, delivery: Delivery, now: number): Promise<void> {
    const result = await sendDelivery(receiver, delivery, {
      env: this.env,
      now,
      firingEndsAfterMs: 4 * this.config.repeatEvery,
    });
    try {
      await this.finish(delivery, result, await redisTime(this.main).catch(() => now));
    } finally {
      this.endedSinceRead.add(delivery.id);
    }
  }

  private async repost(receiver: Receiver & { kind: "alertmanager" }, now: number): Promise<void> {
    const firing = Object.values(await this.main.hgetall(this.keys.alertsFiring)).map(
      (json) => JSON.parse(json) as FiringAlert,
    );
    if (firing.length === 0) return;
    const result = await postAlertmanager(
      receiver.url,
      firing.map((alert) => alertmanagerAlert(alert, now + 4 * this.config.repeatEvery)),
    );
    if (!result.ok) this.lastRepost.delete(receiver.name); // try again at the next pump
    // Its last delivery either way (no delivery of its own waits: the lane is idle), so a receiver
    // back after a failure shows as delivering again.
    await this.setStatus({
      receiver: receiver.name,
      status: result.ok ? "delivered" : "failed",
      at: now,
      deliveryId: "re-post",
      error: result.ok ? null : result.error,
    });
  }

  private async finish(delivery: Delivery, result: SendResult, now: number, drop = false): Promise<void> {
    if (result.ok) {
      await this.main
        .multi()
        .zrem(this.keys.alertsOutbox, delivery.id)
        .hdel(this.keys.alertsDeliveries, delivery.id)
        .hset(this.keys.alertsReceivers, delivery.receiver, status(delivery, "delivered", now, null))
        .exec();
      return;
    }
    const attempts = delivery.attempts + 1;
    if (drop || now - delivery.createdAt > DELIVERY_MAX_AGE_MS) {
      this.log(`alerts: dropped delivery ${delivery.id} after ${attempts} attempt(s): ${result.error}`);
      await this.main
        .multi()
        .zrem(this.keys.alertsOutbox, delivery.id)
        .hdel(this.keys.alertsDeliveries, delivery.id)
        .hset(this.keys.alertsReceivers, delivery.receiver, status(delivery, "dropped", now, result.error))
        .exec();
      return;
    }
    const retry: Delivery = { ...delivery, attempts, nextAt: now + backoffMs(attempts), lastError: result.error };
    await this.main
      .multi()
      .hset(this.keys.alertsDeliveries, delivery.id, JSON.stringify(retry))
      .hset(this.keys.alertsReceivers, delivery.receiver, status(delivery, "failed", now, result.error))
      .exec();
  }

  private async setStatus(entry: ReceiverStatus): Promise<void> {
    await this.main.hset(this.keys.alertsReceivers, entry.receiver, JSON.stringify(entry));
  }
}

function status(delivery: Delivery, state: ReceiverStatus["status"], at: number, error: string | null): string {
  const entry: ReceiverStatus = { receiver: delivery.receiver, status: state, at, deliveryId: delivery.id, error };
  return JSON.stringify(entry);
}
