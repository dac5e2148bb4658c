/**
 * Worker heartbeats. Each worker process keeps a HASH with a TTL (who it is, what it runs) and
 * its score in a ZSET registry (last beat, ms). Liveness is "beat within HEARTBEAT_TTL_MS";
 * counting and listing read the registry by score, never the keyspace. Every beat time and
 * every "now" it is judged against is the Redis server's (`TIME`): a worker whose clock is
 * behind or ahead is judged by the same clock as the others.
 */
import { hostNow, measureRedisClock, redisClock } from "../redis/clock";
import os from "node:os";
import crypto from "node:crypto";
import type { Redis } from "ioredis";
import type { RedisKeys } from "../redis/keys";
import { runScript, type ScriptingClient } from "../redis/scripts";
import { timeReplyMs } from "../redis/time";
import { WORKER_BEAT } from "./scripts";
import { HEARTBEAT_EVERY_MS, HEARTBEAT_TTL_MS } from "./beat-timing";

export { HEARTBEAT_EVERY_MS, HEARTBEAT_TTL_MS };

/**
 * When a worker may judge another dead by its expired heartbeat: only once its own beats have
 * come for a whole HEARTBEAT_TTL_MS with no gap over `maxGapMs` — the streak, kept in its
 * heartbeat HASH by WORKER_BEAT on the Redis clock. While the main Redis refused writes — down,
 * failing over, NOREPLICAS — every worker's beats failed alike, and a heartbeat that expired then
 * says nothing about its worker: the first worker to write again would otherwise close every live
 * worker's runs as abandoned, their steps still running.
 * - `maxGapMs` is one and a half beat intervals: one refused or late beat (an outage, a pause)
 *   starts the streak again, so within a streak every beat of the sweeper went through, and a
 *   live worker has had three beats' time to write as well.
 * - `freshMs`: RUN_ABANDON checks the sweeper's streak when it writes, and that its last beat is
 *   at most `maxGapMs` old — the streak's own rule, carried to the moment of the write. The
 *   worker sweeps right after its beat; a sweep that ioredis resends after a reconnect (sent
 *   before an outage, run after it) finds the beat older. Within that, a live worker beating
 *   every interval last beat at most 12.5 s before: under the 15 s TTL.
 * The beat's reply tells the worker whether to look at others at all. Every worker must run this
 * version for the check to hold: an older one sweeps by its own (local-clock) rule.
 */
export const BEAT_STREAK = {
  requiredMs: HEARTBEAT_TTL_MS,
  maxGapMs: 1.5 * HEARTBEAT_EVERY_MS,
  freshMs: 1.5 * HEARTBEAT_EVERY_MS,
} as const;

/** A beat's answer: its time and since when the streak holds (Redis ms), and what that allows. */
export interface Beat {
  at: number;
  streakSince: number;
  /** The streak has held for BEAT_STREAK.requiredMs: this worker may judge others' heartbeats. */
  judgesOthers: boolean;
}

export interface WorkerIdentity {
  id: string;
  host: string;
  pid: number;
  /** When the process started, on the host clock (`hostNow`): each beat sends it on the Redis clock. */
  startedAt: number;
  version: string;
  /** How this worker contains its steps' processes (lib/rebuilds/steps/containment.ts). */
  containment: StepContainment;
  /**
   * How it contains steps with `memory`/`pids` limits, where that differs (`cgroup` mode runs
   * them in the next mode; process-group where no PID namespace can be made).
   */
  limitedStepsContainment?: StepContainment;
  /**
   * What its steps can do to published builds, where it matters: `read-only` (a root worker's
   * steps see `builds/` read-only) or `writable` (a root worker that cannot do that: a root step
   * could change a published build). Absent for a non-root worker (write bits keep its steps out)
   * and for one of a version that did not report it.
   */
  publishedBuilds?: PublishedBuildsToSteps;
  /**
   * The digest of the schedules its definitions ask for (lib/rebuilds/schedules.ts
   * `schedulesDigest`): which file each live worker runs, so that workers of different files keep
   * each other's schedules (lib/rebuilds/schedule-wants.ts). Absent for a worker of a version that
   * did not report it.
   */
  schedulesDigest?: string;
  /**
   * The rebuilds and tenants its definitions declare (lib/rebuilds/declared.ts `declaredFields`):
   * the "Rebuild now" preview says a job would wait when no live worker declares its target (a
   * deploy under way: black-box helper-180). Absent for a worker of a version that did not report it.
   */
  declares?: string[];
}

export type PublishedBuildsToSteps = "read-only" | "writable";

/** `unknown`: a worker of a version that did not report it. */
export type StepContainment = "cgroup" | "pid-namespace" | "process-group" | "unknown";

export interface WorkerStatus extends WorkerIdentity {
  currentJob: string | null;
  heartbeatAt: number;
  /**
   * At its last beat, how long the worker's upkeep after a beat (sweep, repair, maintenance) had
   * been running, when that was `CLAIMWATCH_UPKEEP_SLOW_MS` (30 s) or more (a hung disk, an unanswered Redis
   * command); `null` otherwise. Measured on the worker's monotonic clock (a duration, not a time).
   */
  upkeepRunningMs: number | null;
}

type HeartbeatClient = ScriptingClient & Pick<Redis, "multi" | "zcount" | "zrangebyscore" | "pipeline" | "time">;

/** Registry entries of workers gone this long are dropped on the way; bounded by live workers. */
const REGISTRY_KEEP_MS = 86_400_000;

/** A worker id safe to put in a key: `host-pid-xxxx`. */
export function newWorkerIdentity(
  version: string,
  {
    containment = "unknown",
    limitedStepsContainment,
    publishedBuilds,
    schedulesDigest,
    declares,
  }: Partial<
    Pick<WorkerIdentity, "containment" | "limitedStepsContainment" | "publishedBuilds" | "schedulesDigest" | "declares">
  > = {},
): WorkerIdentity {
  const host = os.hostname();
  const safeHost = host.replace(/[^A-Za-z0-9_.-]/g, "_").slice(0, 64) || "host";
  return {
    id: `${safeHost}-${process.pid}-${crypto.randomBytes(2).toString("hex")}`,
    host,
    pid: process.pid,
    startedAt: hostNow(),
    version,
    containment,
    ...(limitedStepsContainment && limitedStepsContainment !== containment ? { limitedStepsContainment } : {}),
    ...(publishedBuilds ? { publishedBuilds } : {}),
    ...(schedulesDigest ? { schedulesDigest } : {}),
    ...(declares ? { declares } : {}),
  };
}

/** One beat (one round trip): its time and streak on the Redis clock. */
export async function beat(
  client: HeartbeatClient,
  keys: RedisKeys,
  worker: WorkerIdentity,
  currentJob: string | null,
  { upkeepRunningMs = null }: { upkeepRunningMs?: number | null } = {},
): Promise<Beat> {
  // The first beat's start time is on the Redis clock too: the offset measured before it.
  if (!redisClock.learned()) await measureRedisClock(client);
  const fields: Record<string, string> = {
    id: worker.id,
    host: worker.host,
    pid: String(worker.pid),
    // Its local start on the Redis clock, as the last beat measured it (compared with others').
    startedAt: String(redisClock.fromLocal(worker.startedAt)),
    version: worker.version,
    containment: worker.containment,
    limitedStepsContainment: worker.limitedStepsContainment ?? "",
    publishedBuilds: worker.publishedBuilds ?? "",
    schedulesDigest: worker.schedulesDigest ?? "",
    // Names cannot hold a comma (lib/names.ts); a rebuild and its tenant are a space apart.
    declares: worker.declares?.join(",") ?? "",
    currentJob: currentJob ?? "",
    upkeepRunningMs: upkeepRunningMs === null ? "" : String(Math.round(upkeepRunningMs)),
  };
  const sentAt = performance.now();
  const [at, streakSince] = await runScript(
    client,
    WORKER_BEAT,
    [keys.workerHeartbeat(worker.id), keys.workerRegistry],
    [worker.id, HEARTBEAT_TTL_MS, REGISTRY_KEEP_MS, BEAT_STREAK.maxGapMs, ...Object.entries(fields).flat()],
  );
  redisClock.learn(at, sentAt, performance.now());
  return { at, streakSince, judgesOthers: at - streakSince >= BEAT_STREAK.requiredMs };
}

/** Removes this worker at a clean shutdown, so it does not linger as "live" for a TTL. */
export async function retire(client: HeartbeatClient, keys: RedisKeys, workerId: string): Promise<void> {
  await client.multi().del(keys.workerHeartbeat(workerId)).zrem(keys.workerRegistry, workerId).exec();
}

/** How long a worker that stopped beating without retiring is listed as silent (Workers page, health). */
export const SILENT_LISTED_MS = 3_600_000;

/**
 * A worker that stopped beating without shutting down (a clean stop retires it): paused
 * (SIGSTOP, a frozen container), killed, or cut off from Redis. Only its id (`host-pid-xxxx`)
 * and its last beat are left: its heartbeat hash expired with the beats.
 */
export interface SilentWorker {
  id: string;
  /** Its last heartbeat (Redis clock, ms). */
  lastBeatAt: number;
}

/** Live workers, and the silent ones of the last hour (newest first), judged at `serverTime` (Redis clock). */
export async function countWorkers(
  client: Pick<Redis, "pipeline">,
  keys: RedisKeys,
): Promise<{ live: number; silent: SilentWorker[]; serverTime: number }> {
  const { ids, silent, now } = await liveWorkerIds(client, keys);
  return { live: ids.length, silent, serverTime: now };
}

/**
 * When worker `id` last beat, if it has stopped (no beat within HEARTBEAT_TTL_MS on the Redis
 * clock: paused, dead or cut off from Redis); null while it beats or when it never did. One pipeline.
 */
export async function silentSince(
  client: Pick<Redis, "pipeline">,
  keys: RedisKeys,
  id: string,
): Promise<number | null> {
  const replies = (await client.pipeline().time().zscore(keys.workerRegistry, id).exec()) ?? [];
  const failed = replies.find(([error]) => error);
  if (failed) throw failed[0];
  const now = timeReplyMs(replies[0]![1] as [string, string]);
  const lastBeatAt = replies[1]![1] === null ? null : Number(replies[1]![1]);
  return lastBeatAt !== null && lastBeatAt < now - HEARTBEAT_TTL_MS ? lastBeatAt : null;
}

/** Ids of the live workers (one pipeline: TIME + registry), for judging claims' holders. */
export async function liveWorkerIdSet(client: Pick<Redis, "pipeline">, keys: RedisKeys): Promise<Set<string>> {
  return new Set((await liveWorkerIds(client, keys)).ids);
}

/**
 * Ids of live workers, the silent ones, and the Redis time they were judged at: one pipeline
 * (TIME + registry).
 */
async function liveWorkerIds(
  client: Pick<Redis, "pipeline">,
  keys: RedisKeys,
): Promise<{ ids: string[]; silent: SilentWorker[]; now: number }> {
  const replies = (await client.pipeline().time().zrange(keys.workerRegistry, "0", "-1", "WITHSCORES").exec()) ?? [];
  const failed = replies.find(([error]) => error);
  if (failed) throw failed[0];
  const now = timeReplyMs(replies[0]![1] as [string, string]);
  const rows = replies[1]![1] as string[];
  const ids: string[] = [];
  const silent: SilentWorker[] = [];
  for (let i = 0; i + 1 < rows.length; i += 2) {
    const lastBeatAt = Number(rows[i + 1]);
    if (lastBeatAt >= now - HEARTBEAT_TTL_MS) ids.push(rows[i]!);
    else if (lastBeatAt >= now - SILENT_LISTED_MS) silent.push({ id: rows[i]!, lastBeatAt });
  }
  return { ids, silent: silent.sort((a, b) => b.lastBeatAt - a.lastBeatAt), now };
}

/** Live workers, newest beat first: one pipeline (TIME + registry) plus one of HGETALLs. */
export async function listLiveWorkers(client: Pick<Redis, "pipeline">, keys: RedisKeys): Promise<WorkerStatus[]> {
  return (await listLiveWorkersAt(client, keys)).workers;
}

/** Live workers and the Redis time (ms) their liveness was judged at. */
export async function listLiveWorkersAt(
  client: Pick<Redis, "pipeline">,
  keys: RedisKeys,
): Promise<{ workers: WorkerStatus[]; silent: SilentWorker[]; serverTime: number }> {
  const { ids, silent, now } = await liveWorkerIds(client, keys);
  if (ids.length === 0) return { workers: [], silent, serverTime: now };
  const pipeline = client.pipeline();
  for (const id of ids) pipeline.hgetall(keys.workerHeartbeat(id));
  const replies = (await pipeline.exec()) ?? [];
  const workers: WorkerStatus[] = [];
  for (const [error, hash] of replies) {
    const h = hash as Record<string, string> | null;
    if (error || !h || !h.id) continue; // expired between the two reads
    workers.push({
      id: h.id,
      host: h.host ?? "",
      pid: Number(h.pid),
      startedAt: Number(h.startedAt),
      version: h.version ?? "",
      containment: asContainment(h.containment),
      ...(h.limitedStepsContainment ? { limitedStepsContainment: asContainment(h.limitedStepsContainment) } : {}),
      ...(h.publishedBuilds === "read-only" || h.publishedBuilds === "writable"
        ? { publishedBuilds: h.publishedBuilds }
        : {}),
      ...(h.schedulesDigest ? { schedulesDigest: h.schedulesDigest } : {}),
      ...(h.declares ? { declares: h.declares.split(",") } : {}),
      currentJob: h.currentJob || null,
      heartbeatAt: Number(h.heartbeatAt),
      upkeepRunningMs: h.upkeepRunningMs ? Number(h.upkeepRunningMs) : null,
    });
  }
  return { workers: workers.sort((a, b) => b.heartbeatAt - a.heartbeatAt), silent, serverTime: now };
}

function asContainment(value: string | undefined): StepContainment {
  return value === "cgroup" || value === "pid-namespace" || value === "process-group" ? value : "unknown";
}
