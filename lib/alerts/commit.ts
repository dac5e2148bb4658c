/**
 * The stored alert state and its one writer: the evaluation's changes are committed in one
 * fenced, versioned script (ALERTS_COMMIT), so a paused evaluator that wakes up after another took
 * over cannot record a transition twice, and two evaluations of the same state cannot both commit.
 */
import crypto from "node:crypto";
import type { Redis } from "ioredis";
import type { RedisKeys } from "../redis/keys";
import { ALERTS_COMMIT, runScript, type ScriptingClient } from "../redis/scripts";
import type { Receiver } from "./config";
import type { RuleOutcome } from "./rules";
import type { ActiveAlert, AlertTransition, Delivery, FiringAlert } from "./types";

/** How often an alert that keeps firing has its text brought up to date (planChanges). */
export const CONTENT_REFRESH_MS = 60_000;

/** Transitions kept in the stream (the Alerts page shows the newest). */
export const TRANSITIONS_KEPT = 1_000;

export interface AlertState {
  version: number;
  firing: Map<string, FiringAlert>;
}

/** The firing alerts and the state version, read atomically (MULTI). */
export async function readAlertState(client: Pick<Redis, "multi">, keys: RedisKeys): Promise<AlertState> {
  const replies = (await client.multi().get(keys.alertsVersion).hgetall(keys.alertsFiring).exec()) ?? [];
  const failed = replies.find(([error]) => error);
  if (failed) throw failed[0];
  const version = Number(replies[0]?.[1] ?? 0);
  const firing = new Map<string, FiringAlert>();
  for (const [id, json] of Object.entries((replies[1]?.[1] ?? {}) as Record<string, string>)) {
    try {
      firing.set(id, JSON.parse(json) as FiringAlert);
    } catch {
      // A damaged entry is resolved by the next commit (it is not in the active set).
      firing.set(id, {
        id,
        labels: {} as FiringAlert["labels"],
        annotations: {} as FiringAlert["annotations"],
        startsAt: 0,
      });
    }
  }
  return { version, firing };
}

/**
 * `readAlertState`, or `previous` when the stored version is still its version: every change of
 * the firing alerts is an ALERTS_COMMIT, which bumps the version in the same script, so an equal
 * version means equal firing alerts (the evaluator reads ~500 of them per cycle otherwise).
 */
export async function readAlertStateSince(
  client: Pick<Redis, "multi" | "get">,
  keys: RedisKeys,
  previous: AlertState | null,
): Promise<AlertState> {
  if (previous && Number((await client.get(keys.alertsVersion)) ?? 0) === previous.version) return previous;
  return readAlertState(client, keys);
}

export interface PlannedChanges {
  transitions: AlertTransition[];
  deliveries: Delivery[];
  fire: FiringAlert[];
  resolve: string[];
  pendingSet: [string, number][];
  pendingDel: string[];
  incr: [string, number][];
  set: [string, string][];
}

/**
 * The difference between what holds now and what is stored as firing: transitions, and the
 * content of alerts that keep firing but say something else now. Pure.
 */
export function planChanges(
  state: AlertState,
  outcome: RuleOutcome,
  pending: Record<string, number>,
  receivers: readonly Receiver[],
  now: number,
): PlannedChanges {
  const transitions: AlertTransition[] = [];
  const fire: FiringAlert[] = [];
  const resolve: string[] = [];
  const active = new Map<string, ActiveAlert>(outcome.active.map((alert) => [alert.id, alert]));
  for (const [id, alert] of active) {
    const stored = state.firing.get(id);
    if (stored) {
      // Still firing: no transition, but what it says follows what holds now ("skipped 3 times",
      // "stale for 12 min"), for the Alerts page and Alertmanager's re-posts — at most once a
      // minute: a stale claim's text changes every cycle ("no refresh for 47 s"), and each
      // update is a commit (review helper-125).
      // An update time that is no number or in the future (a Redis clock that stepped back) does
      // not hold the text back (review helper-127).
      const last = Number(stored.updatedAt ?? stored.startsAt);
      const due = !Number.isFinite(last) || last <= 0 || last > now || now - last >= CONTENT_REFRESH_MS;
      if (!sameContent(stored, alert) && due) {
        fire.push({
          ...stored,
          labels: alert.labels,
          annotations: alert.annotations,
          // A damaged entry read back as started at 0 (readAlertState): from now, not 1970.
          startsAt: stored.startsAt > 0 ? stored.startsAt : now,
          updatedAt: now,
        });
      }
      continue;
    }
    const firing: FiringAlert = { id, labels: alert.labels, annotations: alert.annotations, startsAt: now };
    fire.push(firing);
    transitions.push({ id: crypto.randomUUID(), status: "firing", alert: firing, at: now, endsAt: null });
  }
  for (const [id, alert] of state.firing) {
    if (active.has(id)) continue;
    resolve.push(id);
    transitions.push({ id: crypto.randomUUID(), status: "resolved", alert, at: now, endsAt: now });
  }
  const deliveries: Delivery[] = [];
  for (const transition of transitions) {
    for (const receiver of receivers) {
      deliveries.push({
        id: `${transition.id}.${receiver.name}`,
        receiver: receiver.name,
        transition,
        attempts: 0,
        nextAt: now,
        createdAt: now,
        lastError: null,
      });
    }
  }
  const pendingSet = Object.entries(outcome.pendingSet).filter(([id]) => pending[id] === undefined);
  const pendingDel = outcome.pendingDel.filter((id) => pending[id] !== undefined);
  const incr: [string, number][] = outcome.missed.map((m) => [`missed|${m.series}`, m.count]);
  const set: [string, string][] = outcome.missed.map((m) => [`missedcursor|${m.series}`, String(m.upTo)]);
  return { transitions, deliveries, fire, resolve, pendingSet, pendingDel, incr, set };
}

function sameContent(stored: FiringAlert, now: ActiveAlert): boolean {
  return (
    JSON.stringify(stored.labels) === JSON.stringify(now.labels) &&
    JSON.stringify(stored.annotations) === JSON.stringify(now.annotations)
  );
}

export function isEmpty(changes: PlannedChanges): boolean {
  return (
    changes.transitions.length === 0 &&
    changes.fire.length === 0 &&
    changes.pendingSet.length === 0 &&
    changes.pendingDel.length === 0 &&
    changes.incr.length === 0
  );
}

export type CommitResult =
  | { status: "committed"; version: number }
  | { status: "fenced-out"; newestFence: number }
  | { status: "state-changed"; version: number };

export async function commitChanges(
  client: ScriptingClient,
  keys: RedisKeys,
  fence: number,
  readVersion: number,
  changes: PlannedChanges,
): Promise<CommitResult> {
  const payload = JSON.stringify({
    fire: changes.fire.map((alert) => [alert.id, JSON.stringify(alert)]),
    resolve: changes.resolve,
    transitions: changes.transitions.map((t) => JSON.stringify(t)),
    deliveries: changes.deliveries.map((d) => [d.id, JSON.stringify(d)]),
    pendingSet: changes.pendingSet.map(([id, since]) => [id, String(since)]),
    pendingDel: changes.pendingDel,
    incr: changes.incr,
    set: changes.set,
  });
  const reply = await runScript(
    client,
    ALERTS_COMMIT,
    [
      keys.alertsFence,
      keys.alertsVersion,
      keys.alertsFiring,
      keys.alertsPending,
      keys.alertsTransitions,
      keys.alertsOutbox,
      keys.alertsDeliveries,
      keys.metricsCounters,
    ],
    [fence, readVersion, payload, TRANSITIONS_KEPT],
  );
  const [code, value] = reply as [number, number];
  if (code === 1) return { status: "committed", version: Number(value) };
  if (code === -6) return { status: "fenced-out", newestFence: Number(value) };
  if (code === -7) return { status: "state-changed", version: Number(value) };
  throw new Error(`alerts commit: unexpected reply ${JSON.stringify(reply)}`);
}
