/**
 * Worker heartbeats. Each worker process keeps a HASH with a TTL (who it is, what it runs) and
 * its score in a ZSET registry (last beat, ms). Liveness is "beat within HEARTBEAT_TTL_MS";
 * counting and listing read the registry by score, never the keyspace.
 */
import os from "node:os";
import crypto from "node:crypto";
import type { Redis } from "ioredis";
import type { RedisKeys } from "../redis/keys";

/** How often a worker beats. */
export const HEARTBEAT_EVERY_MS = 5_000;
/** A worker that has not beaten for this long is gone (three missed beats). */
export const HEARTBEAT_TTL_MS = 15_000;

export interface WorkerIdentity {
  id: string;
  host: string;
  pid: number;
  startedAt: number;
  version: string;
  /** How this worker contains its steps' processes (lib/rebuilds/steps/containment.ts). */
  containment: StepContainment;
}

/** `unknown`: a worker of a version that did not report it. */
export type StepContainment = "pid-namespace" | "process-group" | "unknown";

export interface WorkerStatus extends WorkerIdentity {
  currentJob: string | null;
  heartbeatAt: number;
}

type HeartbeatClient = Pick<Redis, "multi" | "zcount" | "zrangebyscore" | "pipeline">;

/** A worker id safe to put in a key: `host-pid-xxxx`. */
export function newWorkerIdentity(version: string, containment: StepContainment = "unknown"): WorkerIdentity {
  const host = os.hostname();
  const safeHost = host.replace(/[^A-Za-z0-9_.-]/g, "_").slice(0, 64) || "host";
  return {
    id: `${safeHost}-${process.pid}-${crypto.randomBytes(2).toString("hex")}`,
    host,
    pid: process.pid,
    startedAt: Date.now(),
    version,
    containment,
  };
}

export async function beat(
  client: HeartbeatClient,
  keys: RedisKeys,
  worker: WorkerIdentity,
  currentJob: string | null,
  now = Date.now(),
): Promise<void> {
  const key = keys.workerHeartbeat(worker.id);
  await client
    .multi()
    .hset(key, {
      id: worker.id,
      host: worker.host,
      pid: String(worker.pid),
      startedAt: String(worker.startedAt),
      version: worker.version,
      containment: worker.containment,
      currentJob: currentJob ?? "",
      heartbeatAt: String(now),
    })
    .pexpire(key, HEARTBEAT_TTL_MS)
    .zadd(keys.workerRegistry, now, worker.id)
    // Registry entries of workers gone for a day are dropped on the way; bounded by live workers.
    .zremrangebyscore(keys.workerRegistry, "-inf", now - 86_400_000)
    .exec();
}

/** Removes this worker at a clean shutdown, so it does not linger as "live" for a TTL. */
export async function retire(client: HeartbeatClient, keys: RedisKeys, workerId: string): Promise<void> {
  await client.multi().del(keys.workerHeartbeat(workerId)).zrem(keys.workerRegistry, workerId).exec();
}

export async function countLiveWorkers(
  client: Pick<Redis, "zcount">,
  keys: RedisKeys,
  now = Date.now(),
): Promise<number> {
  return client.zcount(keys.workerRegistry, now - HEARTBEAT_TTL_MS, "+inf");
}

/** Live workers, newest beat first: one ZRANGEBYSCORE plus one pipeline of HGETALLs. */
export async function listLiveWorkers(
  client: HeartbeatClient,
  keys: RedisKeys,
  now = Date.now(),
): Promise<WorkerStatus[]> {
  const ids = await client.zrangebyscore(keys.workerRegistry, now - HEARTBEAT_TTL_MS, "+inf");
  if (ids.length === 0) return [];
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
      containment: h.containment === "pid-namespace" || h.containment === "process-group" ? h.containment : "unknown",
      currentJob: h.currentJob || null,
      heartbeatAt: Number(h.heartbeatAt),
    });
  }
  return workers.sort((a, b) => b.heartbeatAt - a.heartbeatAt);
}
