/**
 * Workers of different definitions side by side — a rolling deploy, a worker of the old file
 * restarted mid-deploy, a rollback, a canary — must not undo each other's schedules (black-box
 * helper-157: a worker of the old file that started while new ones ran removed the schedules only
 * the new file has; review helper-162: any "one file leads" rule loses ticks when the leader
 * pauses, or when a straggler of the file rolled back from comes back).
 *
 * So no file leads. Each worker notes, at its start and every minute check, which file it runs and
 * what each of that file's schedules is (scheduler id → spec key). A schedule is then what the
 * live files agree on:
 * - one a live file asks for exists (one is missing: it is added at once, by any worker whose
 *   file has it);
 * - one whose scheduler is as some live file asks is left as it is, even if this worker's file
 *   says otherwise (a changed `cron` takes effect once no worker of the old file runs);
 * - one no live file asks for is removed — only when every live worker's file is known.
 * A worker counts as live while its heartbeat beats or its note is younger than
 * SCHEDULE_NOTE_COUNTS_MS: a worker paused, killed or stopped keeps its schedules for a while, so
 * a short pause or a restart does not remove them with their pending tick. A clean stop leaves its
 * note too (review helper-163: taken back, a restart of the only worker of a file let another
 * file's check remove its schedules in the gap, the tick due then lost uncounted); a rollback's
 * or a removal's schedules go within SCHEDULE_NOTE_COUNTS_MS and a check of the last worker stopping.
 */
import crypto from "node:crypto";
import type { Redis } from "ioredis";
import { z } from "zod";
import type { RedisKeys } from "../redis/keys";
import { runScript, type ScriptingClient } from "../redis/scripts";
import { parseStoredJson } from "../redis/stored-json";
import { listLiveWorkers } from "../workers/heartbeat";
import { SCHEDULE_WANTS_NOTE } from "./scripts";

/** How long a worker's note counts after its last check (it checks every minute). */
export const SCHEDULE_NOTE_COUNTS_MS = 180_000;
/** Notes of workers silent this long are dropped (a worker back after that notes again at its next check). */
const SCHEDULE_NOTE_DROPPED_MS = 86_400_000;

/** What a scheduler runs, as one key: cron, time zone, job name, data and the options claimwatch sets. */
export function scheduleSpecKey(spec: {
  pattern?: string | null;
  tz?: string | null;
  name?: string | null;
  data?: unknown;
  opts?: Record<string, unknown>;
}): string {
  return crypto
    .createHash("sha256")
    .update(
      canonicalJson([spec.pattern ?? null, spec.tz ?? null, spec.name ?? null, spec.data ?? null, spec.opts ?? {}]),
    )
    .digest("hex")
    .slice(0, 16);
}

/** JSON with object keys sorted (the stored template's key order is not ours to rely on). */
function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(",")}]`;
  if (value && typeof value === "object")
    return `{${Object.entries(value as Record<string, unknown>)
      .filter(([, v]) => v !== undefined)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
      .map(([k, v]) => `${JSON.stringify(k)}:${canonicalJson(v)}`)
      .join(",")}}`;
  return JSON.stringify(value ?? null);
}

/** A file's schedules: scheduler id → spec key. */
export type ScheduleWants = ReadonlyMap<string, string>;

/** The files live workers run, and the live workers whose file's schedules are not known. */
export interface LiveScheduleFiles {
  /** Schedules digest → what that file asks for, and the live workers running it. */
  files: Map<string, { wants: ScheduleWants; workers: string[] }>;
  /**
   * Live workers whose file's schedules are not known: of a version that does not note them, or
   * whose note Redis lost (it notes again at its next check). Nothing is removed while they run.
   */
  unknown: string[];
}

const storedWants = z.record(z.string(), z.string());

/**
 * Notes this worker's file and its schedules, and reads every live worker's: one script, then the
 * live workers' heartbeats (one pipeline each way).
 */
export async function noteScheduleWants(
  client: ScriptingClient & Pick<Redis, "pipeline">,
  keys: RedisKeys,
  workerId: string,
  digest: string,
  wants: ScheduleWants,
): Promise<LiveScheduleFiles> {
  const [now, workerNotes, fileNotes] = await runScript(
    client,
    SCHEDULE_WANTS_NOTE,
    [keys.scheduleWorkers, keys.scheduleWants],
    [workerId, digest, JSON.stringify(Object.fromEntries(wants)), SCHEDULE_NOTE_DROPPED_MS],
  );
  const wantsOf = new Map<string, ScheduleWants>();
  for (let i = 0; i + 1 < fileNotes.length; i += 2) {
    const parsed = parseStoredJson(storedWants, fileNotes[i + 1]!);
    if (parsed) wantsOf.set(fileNotes[i]!, new Map(Object.entries(parsed)));
  }
  const live: LiveScheduleFiles = { files: new Map(), unknown: [] };
  const count = (worker: string, file: string | undefined) => {
    const fileWants = file === undefined ? undefined : wantsOf.get(file);
    if (!file || !fileWants) {
      if (!live.unknown.includes(worker)) live.unknown.push(worker);
      return;
    }
    const entry = live.files.get(file) ?? { wants: fileWants, workers: [] };
    if (!entry.workers.includes(worker)) entry.workers.push(worker);
    live.files.set(file, entry);
  };
  for (let i = 0; i + 1 < workerNotes.length; i += 2) {
    const [at, file] = splitNote(workerNotes[i + 1]!);
    if (at >= now - SCHEDULE_NOTE_COUNTS_MS) count(workerNotes[i]!, file);
  }
  for (const worker of await listLiveWorkers(client, keys)) {
    const noted =
      live.unknown.includes(worker.id) || [...live.files.values()].some((f) => f.workers.includes(worker.id));
    if (!noted) count(worker.id, worker.schedulesDigest);
  }
  return live;
}

function splitNote(note: string): [at: number, digest: string | undefined] {
  const space = note.indexOf(" ");
  return space < 0 ? [0, undefined] : [Number(note.slice(0, space)), note.slice(space + 1) || undefined];
}

/** This worker's note no longer counts (tests: a process that synced as a worker would, and is done). */
export async function forgetScheduleWants(
  client: Pick<Redis, "hdel">,
  keys: RedisKeys,
  workerId: string,
): Promise<void> {
  await client.hdel(keys.scheduleWorkers, workerId);
}

/** What a check does with each scheduler. */
export interface SchedulePlan {
  /** This file's schedules to upsert, or to check for a lost next tick (as it asks, or missing, or as no live file asks). */
  ours: string[];
  /** This file's schedules whose scheduler is as another live file asks: left as they are. */
  asOthersAsk: string[];
  /** Schedulers this file does not have that another live file asks for (or a file not known may): kept. */
  keptForOthers: string[];
  /** Schedulers no live file asks for: removed. */
  remove: string[];
  /** Live workers run other files (or files not known): the dashboard goes by the queue's schedulers. */
  mixed: boolean;
}

/**
 * The rule in the file header, as a pure function: `mine` this worker's file (digest and
 * schedules), `live` every live worker's, `existing` the claimwatch schedulers (`sched.*`) the
 * queue holds, by id → spec key.
 */
export function planSchedules(
  mine: { digest: string; wants: ScheduleWants },
  live: LiveScheduleFiles,
  existing: ReadonlyMap<string, string>,
): SchedulePlan {
  const others = [...live.files.entries()].filter(([digest]) => digest !== mine.digest).map(([, file]) => file.wants);
  const askedByOthers = (id: string, key?: string) =>
    others.some((wants) => wants.has(id) && (key === undefined || wants.get(id) === key));
  const plan: SchedulePlan = {
    ours: [],
    asOthersAsk: [],
    keptForOthers: [],
    remove: [],
    mixed: others.length > 0 || live.unknown.length > 0,
  };
  for (const [id, key] of mine.wants) {
    const current = existing.get(id);
    if (current !== undefined && current !== key && askedByOthers(id, current)) plan.asOthersAsk.push(id);
    else plan.ours.push(id);
  }
  for (const id of existing.keys()) {
    if (mine.wants.has(id)) continue;
    if (askedByOthers(id) || live.unknown.length > 0) plan.keptForOthers.push(id);
    else plan.remove.push(id);
  }
  return plan;
}
