/**
 * Schedules (Celery beat's job): every process upserts one BullMQ job scheduler per scheduled
 * rebuild and tenant at start, and removes claimwatch schedulers no longer in the definitions.
 * Upserts of one id are idempotent, so N processes give one job per tick, and no single "beat"
 * process is needed.
 *
 * Workers of different definitions side by side (a rolling deploy, a worker restarted mid-deploy,
 * a rollback): each notes its file's schedules, and the schedules are what the live files agree
 * on — added at once, changed once no worker of the old file runs, removed once no live file asks
 * for them (lib/rebuilds/schedule-wants.ts).
 *
 * Paused schedules (an operator's "pause"): the pause is a field in `pausedSchedules` (Redis, so
 * it survives restarts), and the scheduler is removed from BullMQ with its next delayed tick, so
 * a paused schedule enqueues nothing. Every upsert checks the pause *after* upserting and removes
 * the scheduler again if paused: a worker starting while an operator pauses cannot bring the
 * schedule back (the pause writes first and removes second; one of the two removals sees it).
 * A tick that was already waiting when the pause came is removed by the pause, and a worker that
 * still picks one up does not run it (worker/rebuild-worker.ts). Resuming upserts the scheduler
 * and moves `schedulerSince` to now: ticks while paused are not missed ticks.
 */
import crypto from "node:crypto";
import { isDeepStrictEqual } from "node:util";
import type { Queue } from "bullmq";
import type { Redis } from "ioredis";
import { z } from "zod";
import { describeError } from "../describe-error";
import type { RedisKeys } from "../redis/keys";
import { parseStoredJson } from "../redis/stored-json";
import { tenantsOf, type Definitions, type RebuildDefinition } from "./definitions";
import { runScript, type ScriptingClient } from "../redis/scripts";
import { jobOptionsFor, schedulerIdOf, scheduledTickOf, type RebuildJobData } from "./queue";
import { SCHEDULE_DIGEST_KEEP } from "./scripts";
import { noteScheduleWants, planSchedules, scheduleSpecKey } from "./schedule-wants";

type SchedulerQueue = Pick<Queue, "upsertJobScheduler" | "removeJobScheduler" | "getJobScheduler" | "getJobState">;
type PauseClient = Pick<Redis, "hget" | "hset" | "hdel" | "set">;

/** Where schedules live: BullMQ's job schedulers, and the pauses in Redis. */
export interface ScheduleStore<Q extends SchedulerQueue = SchedulerQueue> {
  queue: Q;
  client: PauseClient;
  keys: RedisKeys;
}

export interface SchedulePause {
  actor: string;
  reason: string;
  /** When it was paused (ms). */
  at: number;
}

const schedulePause = z.object({ actor: z.string(), reason: z.string(), at: z.number() });

function parsePause(raw: string | null | undefined): SchedulePause | null {
  return raw ? (parseStoredJson(schedulePause, raw) ?? null) : null;
}

/**
 * Whether a stored pause entry (HGET of `pausedSchedules`) pauses its schedule, as the scheduler
 * and the worker read it: a damaged entry does not (they run its ticks), so the banner and the
 * scheduleMissed alert must not take it as a pause either.
 */
export function pausesSchedule(raw: unknown): boolean {
  return typeof raw === "string" && parsePause(raw) !== null;
}

/**
 * A worker's sync of the schedules, at its start and every minute (worker/index.ts): its file's
 * schedules upserted — missing, changed, or without a pending next tick (a crash that lost the
 * last writes, a worker that died as it queued the next tick: the schedule would end for good) —
 * unless a live worker's other file asks for the scheduler as it is; schedulers no live file asks
 * for removed (lib/rebuilds/schedule-wants.ts). A scheduler as wanted with its tick pending is
 * left alone: an upsert would replace a tick that fell due while no worker ran.
 */
export async function syncSchedules(
  queue: SchedulerQueue & Pick<Queue, "getJobSchedulers">,
  definitions: Definitions,
  client: PauseClient & ScriptingClient & Pick<Redis, "del" | "pipeline">,
  keys: RedisKeys,
  workerId: string,
): Promise<SyncedSchedules> {
  const specs = [...wantedSchedules(definitions)];
  const wants = new Map(specs.map(({ spec }) => [spec.id, specKeyOf(spec)]));
  const digest = schedulesDigest(definitions);
  // The schedulers first, then the notes: a worker notes its file before it upserts, so any
  // scheduler read here is backed by a note read after it (review helper-163: read the other way
  // round, the first worker of a new file could have its schedule removed as no file's).
  const existing = new Map<string, StoredScheduler>();
  for (const scheduler of await queue.getJobSchedulers(0, -1)) {
    const id = scheduler.key ?? scheduler.id;
    if (id?.startsWith("sched.")) existing.set(id, scheduler);
  }
  const live = await noteScheduleWants(client, keys, workerId, digest, wants);
  const readAt = performance.now();
  const plan = planSchedules(
    { digest, wants },
    live,
    new Map([...existing].map(([id, scheduler]) => [id, storedSpecKey(scheduler)])),
  );
  const synced: SyncedSchedules = {
    upserted: [],
    repaired: [],
    paused: [],
    failed: [],
    removed: [],
    asOthersAsk: plan.asOthersAsk,
    keptForOthers: plan.keptForOthers,
    otherWorkers: [...live.files.entries()]
      .filter(([file]) => file !== digest)
      .flatMap(([, file]) => file.workers)
      .concat(live.unknown),
    removalsPostponed: false,
  };
  // Removals first, on what was just read; a sync held up (a pause, a slow Redis) decides again next time.
  for (const id of plan.remove) {
    if (performance.now() - readAt > REMOVE_WITHIN_MS) {
      synced.removalsPostponed = true;
      break;
    }
    try {
      await queue.removeJobScheduler(id);
      await client.del(keys.schedulerSince(id));
      synced.removed.push(id);
    } catch (error) {
      synced.failed.push({ id, message: `not removed: ${describeError(error)}` });
    }
  }
  const ours = new Set(plan.ours);
  // As wanted with the next tick pending: left alone (asked together: one round trip's wait, not one each).
  const current = await pendingTicks(
    queue,
    specs.flatMap(({ spec }) => {
      const stored = existing.get(spec.id);
      return ours.has(spec.id) && stored && wants.get(spec.id) === storedSpecKey(stored)
        ? [{ id: spec.id, next: stored.next }]
        : [];
    }),
  );
  if (current.size > 0) {
    // As upsertSchedule notes it: when its ticks began (lost with Redis's state, from now).
    const since = client.pipeline();
    for (const id of current) since.set(keys.schedulerSince(id), String(Date.now()), "NX");
    // Not noted (Redis refused it): said, and the upserts and the digest still follow.
    await since
      .exec()
      .catch((error: unknown) =>
        synced.failed.push({ id: [...current].join(", "), message: `since-time not noted: ${describeError(error)}` }),
      );
  }
  for (const { definition, tenant, spec } of specs) {
    if (!ours.has(spec.id)) continue;
    if (current.has(spec.id)) {
      synced.upserted.push(spec.id);
      continue;
    }
    // One schedule that cannot be upserted (Redis refused it) does not keep the others from theirs.
    try {
      const outcome = await upsertSchedule({ queue, client, keys, definitions }, definition, tenant);
      if (outcome === "paused") synced.paused.push(spec.id);
      if (outcome === "current" || outcome === "upserted") synced.upserted.push(spec.id);
      if (outcome === "upserted") synced.repaired.push(spec.id);
    } catch (error) {
      synced.failed.push({ id: spec.id, message: describeError(error) });
    }
  }
  // What the dashboard's next runs go by: this file while every live worker runs it.
  await client.set(keys.scheduleDefinitions, plan.mixed ? "mixed" : digest, "PX", SCHEDULE_DIGEST_TTL_MS);
  return synced;
}

/** A sync removes schedulers only this soon after it read which files are live. */
const REMOVE_WITHIN_MS = 5_000;

/** Which of these schedulers have their next tick pending: asked 200 at a time, each batch at once. */
async function pendingTicks(
  queue: SchedulerQueue,
  schedulers: { id: string; next: number | null | undefined }[],
): Promise<Set<string>> {
  const pending = new Set<string>();
  for (let i = 0; i < schedulers.length; i += 200) {
    const batch = schedulers.slice(i, i + 200);
    const answers = await Promise.all(batch.map(({ id, next }) => tickPending(queue, id, next).catch(() => false)));
    batch.forEach(({ id }, j) => answers[j] && pending.add(id));
  }
  return pending;
}

function specKeyOf(spec: SchedulerSpec): string {
  return scheduleSpecKey({
    pattern: spec.repeat.pattern,
    tz: spec.repeat.tz,
    name: spec.template.name,
    data: spec.template.data,
    opts: spec.template.opts,
  });
}

/** The spec key of a stored scheduler: the options claimwatch sets, as `specKeyOf` takes them. */
function storedSpecKey(stored: StoredScheduler): string {
  const opts = (stored.template?.opts ?? {}) as Record<string, unknown>;
  return scheduleSpecKey({
    pattern: stored.pattern,
    tz: stored.tz,
    name: stored.name,
    data: stored.template?.data,
    opts: Object.fromEntries(SCHEDULER_OPTS.map((name) => [name, opts[name]])),
  });
}
/** The job options a scheduler's template carries (`schedulerSpec`). */
const SCHEDULER_OPTS = ["attempts", "backoff", "removeOnComplete", "removeOnFail"] as const;

/**
 * How long the digest of the definitions the schedules follow outlives the last worker that runs
 * them (each one keeps it, beside its heartbeat): then the dashboard goes by its own file.
 */
export const SCHEDULE_DIGEST_TTL_MS = 180_000;

/** Keeps the digest alive when it names `definitions` (`kept`, else `other`). One round trip. */
export async function keepScheduleDigest(
  client: ScriptingClient,
  keys: RedisKeys,
  definitions: Definitions,
): Promise<"kept" | "other"> {
  const reply = await runScript(
    client,
    SCHEDULE_DIGEST_KEEP,
    [keys.scheduleDefinitions],
    [schedulesDigest(definitions), SCHEDULE_DIGEST_TTL_MS],
  );
  return reply === 1 ? "kept" : "other";
}

/** A digest of every schedule the definitions ask for: id, cron, time zone, job template. */
export function schedulesDigest(definitions: Definitions): string {
  let digest = digests.get(definitions);
  if (digest === undefined) {
    const wanted = [...wantedSchedules(definitions)].map(({ spec }) => [spec.id, spec.repeat, spec.template]);
    digest = crypto.createHash("sha256").update(JSON.stringify(wanted)).digest("hex");
    digests.set(definitions, digest);
  }
  return digest;
}
const digests = new WeakMap<Definitions, string>();

/** One rebuild's (and tenant's) schedule as its ticks come: the cron and time zone its scheduler runs. */
export interface TickingSchedule {
  schedulerId: string;
  rebuild: string;
  tenant: string | undefined;
  cron: string;
  tz: string;
}

/** The schedules `definitions` ask for, one per scheduled rebuild and tenant, as they would tick. */
export function definitionSchedules(definitions: Definitions): TickingSchedule[] {
  const schedules: TickingSchedule[] = [];
  for (const definition of definitions.rebuilds.values()) {
    if (!definition.schedule) continue;
    const { cron, tz } = definition.schedule;
    for (const tenant of tenantsOf(definition))
      schedules.push({
        schedulerId: schedulerIdOf(definition.name, tenant),
        rebuild: definition.name,
        tenant,
        cron,
        tz,
      });
  }
  return schedules;
}

/**
 * The schedules that tick, for the rebuilds and tenants `definitions` know — what the dashboard's
 * next runs, its missed-tick banner and the scheduleMissed alert go by. This process's own
 * definitions while they are the ones the workers set the schedules up with (the digest in
 * Redis names them, or names none: no worker ran for SCHEDULE_DIGEST_TTL_MS); else
 * (`definitionsDiffer`: a dashboard server not restarted after the file was edited and the
 * workers were, a rolling deploy) the queue's job schedulers: a schedule changed, added or
 * removed since this process read its file ticks as the workers set it up, so a tick the file
 * here still names is no missed tick (black-box helper-143). A paused schedule has no scheduler.
 */
export async function tickingSchedules(
  queue: Pick<Queue, "getJobSchedulers">,
  client: Pick<Redis, "get">,
  keys: RedisKeys,
  definitions: Definitions,
): Promise<{ schedules: TickingSchedule[]; definitionsDiffer: boolean }> {
  const stored = await client.get(keys.scheduleDefinitions);
  if (stored === null || stored === schedulesDigest(definitions))
    return { schedules: definitionSchedules(definitions), definitionsDiffer: false };
  const schedulers = new Map<string, { pattern?: string; tz?: string }>();
  for (const scheduler of await queue.getJobSchedulers(0, -1)) schedulers.set(scheduler.key ?? scheduler.id, scheduler);
  const schedules: TickingSchedule[] = [];
  for (const definition of definitions.rebuilds.values()) {
    for (const tenant of tenantsOf(definition)) {
      const schedulerId = schedulerIdOf(definition.name, tenant);
      const scheduler = schedulers.get(schedulerId);
      if (scheduler?.pattern)
        schedules.push({
          schedulerId,
          rebuild: definition.name,
          tenant,
          cron: scheduler.pattern,
          tz: scheduler.tz ?? "UTC",
        });
    }
  }
  return { schedules, definitionsDiffer: true };
}

/** Every schedule the definitions ask for: one per scheduled rebuild and tenant, with its scheduler. */
function* wantedSchedules(
  definitions: Definitions,
): Generator<{ definition: RebuildDefinition; tenant: string | undefined; spec: SchedulerSpec }> {
  for (const definition of definitions.rebuilds.values()) {
    if (!definition.schedule) continue;
    for (const tenant of tenantsOf(definition))
      yield { definition, tenant, spec: schedulerSpec(definition, tenant, definitions) };
  }
}

/** What `syncSchedules` did, by scheduler id. */
export interface SyncedSchedules {
  /** Scheduled (not paused): upserted, or found as wanted with its next tick pending. */
  upserted: string[];
  /** Of those, the ones that needed an upsert: new, changed, or without a pending next tick. */
  repaired: string[];
  /** Paused by an operator: no scheduler. */
  paused: string[];
  /** Not upserted: what Redis or BullMQ answered. */
  failed: { id: string; message: string }[];
  /** Schedulers no live worker's definitions ask for, removed. */
  removed: string[];
  /** This file's schedules left as another live worker's definitions ask (lib/rebuilds/schedule-wants.ts). */
  asOthersAsk: string[];
  /** Schedulers this file does not have, kept: another live worker's definitions ask for them (or may). */
  keptForOthers: string[];
  /** Live workers of other definitions (or of definitions not known). */
  otherWorkers: string[];
  /** Removals left to the next check: this one took too long after it read which files are live. */
  removalsPostponed: boolean;
}

/**
 * Upserts one scheduler unless its schedule is paused: `paused`, `current` (as wanted, its next
 * tick pending: left alone) or `upserted` (`not-scheduled`: the rebuild has no schedule). The
 * pause is read after the upsert (see the file header): a pause seen then removes it again.
 */
export async function upsertSchedule(
  store: ScheduleStore & { definitions: Definitions },
  definition: RebuildDefinition,
  tenant: string | undefined,
  options: { resumed?: boolean } = {},
): Promise<"not-scheduled" | "paused" | "current" | "upserted"> {
  const { queue, client, keys, definitions } = store;
  if (!definition.schedule) return "not-scheduled";
  const id = schedulerIdOf(definition.name, tenant);
  if (await readSchedulePause(client, keys, definition.name, tenant)) return "paused";
  const { repeat, template } = schedulerSpec(definition, tenant, definitions);
  // An upsert replaces the scheduler's pending tick with the next one from now: a tick that fell
  // due while no worker ran would be lost. So a scheduler as wanted, with its tick pending, stays.
  const { current, timingChanged } = await schedulerState(queue, id, repeat, template);
  if (!current) await queue.upsertJobScheduler(id, repeat, template);
  if (await readSchedulePause(client, keys, definition.name, tenant)) {
    await queue.removeJobScheduler(id);
    return "paused";
  }
  // Ticks before this cannot have been missed: the first upsert, the end of a pause, or a change
  // of its cron or time zone (the ticks before were another schedule's: helper-143).
  if (options.resumed || timingChanged) await client.set(keys.schedulerSince(id), String(Date.now()));
  else await client.set(keys.schedulerSince(id), String(Date.now()), "NX");
  return current ? "current" : "upserted";
}

interface SchedulerSpec {
  id: string;
  repeat: { pattern: string; tz?: string };
  template: { name: string; data: RebuildJobData; opts: Record<string, unknown> };
}

/** The BullMQ job scheduler a scheduled rebuild (and tenant) asks for. */
function schedulerSpec(
  definition: RebuildDefinition,
  tenant: string | undefined,
  definitions: Definitions,
): SchedulerSpec {
  const data: RebuildJobData = {
    rebuild: definition.name,
    ...(tenant ? { tenant } : {}),
    force: false,
    trigger: "schedule",
  };
  const { attempts, backoff, removeOnComplete, removeOnFail } = jobOptionsFor(definition, definitions.retention);
  return {
    id: schedulerIdOf(definition.name, tenant),
    repeat: { pattern: definition.schedule!.cron, tz: definition.schedule!.tz },
    template: { name: definition.name, data, opts: { attempts, backoff, removeOnComplete, removeOnFail } },
  };
}

type StoredScheduler = NonNullable<Awaited<ReturnType<Queue["getJobScheduler"]>>>;

/** Whether BullMQ holds a scheduler as `repeat` and `template` ask (the same cron, time zone and job template). */
function sameScheduler(
  existing: StoredScheduler,
  repeat: SchedulerSpec["repeat"],
  template: SchedulerSpec["template"],
): boolean {
  if (existing.pattern !== repeat.pattern || (existing.tz ?? undefined) !== (repeat.tz ?? undefined)) return false;
  if (existing.name !== template.name || !isDeepStrictEqual(existing.template?.data, template.data)) return false;
  const opts = (existing.template?.opts ?? {}) as Record<string, unknown>;
  return Object.entries(template.opts).every(([name, value]) => isDeepStrictEqual(opts[name], value));
}

/**
 * Whether scheduler `id`'s next tick is still to run: delayed, or waiting for a worker. One a
 * worker has taken should have been followed by the next already (a worker queues it as it takes
 * one); an upsert meanwhile is harmless (the worker's own write of the next tick then does nothing).
 */
async function tickPending(queue: SchedulerQueue, id: string, next: number | null | undefined): Promise<boolean> {
  if (next === undefined || next === null) return false;
  const state = await queue.getJobState(`repeat:${id}:${next}`);
  return state === "delayed" || state === "waiting" || state === "prioritized";
}

/**
 * Whether BullMQ holds scheduler `id` as wanted and its next tick is still pending. Anything else
 * — no scheduler, a changed one, a tick that is gone — is upserted.
 */
/**
 * Whether scheduler `id` is as wanted with its next tick pending (`current`), and whether it
 * exists with another cron or time zone (`timingChanged`: its ticks until now were another
 * schedule's).
 */
async function schedulerState(
  queue: SchedulerQueue,
  id: string,
  repeat: SchedulerSpec["repeat"],
  template: SchedulerSpec["template"],
): Promise<{ current: boolean; timingChanged: boolean }> {
  const existing = await queue.getJobScheduler(id);
  if (!existing) return { current: false, timingChanged: false };
  const timingChanged = existing.pattern !== repeat.pattern || (existing.tz ?? undefined) !== (repeat.tz ?? undefined);
  if (!sameScheduler(existing, repeat, template)) return { current: false, timingChanged };
  return { current: await tickPending(queue, id, existing.next), timingChanged };
}

export async function readSchedulePause(
  client: Pick<Redis, "hget">,
  keys: RedisKeys,
  rebuild: string,
  tenant: string | undefined,
): Promise<SchedulePause | null> {
  return parsePause(await client.hget(keys.pausedSchedules, schedulerIdOf(rebuild, tenant)));
}

export async function isSchedulePaused(
  client: Pick<Redis, "hget">,
  keys: RedisKeys,
  rebuild: string,
  tenant: string | undefined,
): Promise<boolean> {
  return (await readSchedulePause(client, keys, rebuild, tenant)) !== null;
}

/** Every paused schedule: scheduler id → pause (one HGETALL; the list is as long as the schedules). */
export async function readSchedulePauses(
  client: Pick<Redis, "hgetall">,
  keys: RedisKeys,
): Promise<Map<string, SchedulePause>> {
  const pauses = new Map<string, SchedulePause>();
  for (const [id, raw] of Object.entries(await client.hgetall(keys.pausedSchedules))) {
    const pause = parsePause(raw);
    if (pause) pauses.set(id, pause);
  }
  return pauses;
}

export type PauseResult =
  | { status: "paused"; schedulerId: string; removedTicks: string[] }
  | { status: "already-paused"; schedulerId: string; pause: SchedulePause }
  | { status: "not-scheduled" };

/**
 * Pauses one schedule: the pause first (so no upsert brings it back), then the scheduler with
 * its next delayed tick, then any of its ticks already waiting (not started: removable).
 */
export async function pauseSchedule(
  store: ScheduleStore<SchedulerQueue & Pick<Queue, "getJobs">>,
  definition: RebuildDefinition,
  tenant: string | undefined,
  pause: SchedulePause,
): Promise<PauseResult> {
  const { queue, client, keys } = store;
  if (!definition.schedule) return { status: "not-scheduled" };
  const id = schedulerIdOf(definition.name, tenant);
  const existing = await readSchedulePause(client, keys, definition.name, tenant);
  if (existing) return { status: "already-paused", schedulerId: id, pause: existing };
  await client.hset(keys.pausedSchedules, id, JSON.stringify(pause));
  await queue.removeJobScheduler(id);
  const removedTicks: string[] = [];
  for (const job of await queue.getJobs(["waiting", "prioritized", "delayed"], 0, 999)) {
    if (!job?.id || scheduledTickOf(job.id)?.schedulerId !== id || job.attemptsStarted > 0) continue;
    try {
      await job.remove();
      removedTicks.push(job.id);
    } catch {
      // Started meanwhile: the worker runs it (it began before the pause took effect).
    }
  }
  return { status: "paused", schedulerId: id, removedTicks };
}

export type ResumeResult =
  | { status: "resumed"; schedulerId: string }
  | { status: "not-paused"; schedulerId: string }
  | { status: "not-scheduled" };

/** Resumes one schedule: the pause is dropped and the scheduler upserted (the next tick is queued). */
export async function resumeSchedule(
  store: ScheduleStore & { definitions: Definitions },
  definition: RebuildDefinition,
  tenant: string | undefined,
): Promise<ResumeResult> {
  const { client, keys } = store;
  if (!definition.schedule) return { status: "not-scheduled" };
  const id = schedulerIdOf(definition.name, tenant);
  const removed = await client.hdel(keys.pausedSchedules, id);
  // Upserted even when it was not paused: a harmless repeat of what every worker does at start.
  await upsertSchedule(store, definition, tenant, { resumed: removed > 0 });
  return removed > 0 ? { status: "resumed", schedulerId: id } : { status: "not-paused", schedulerId: id };
}
