/**
 * Run records in the main Redis: a HASH per run (upserted by run id, so a repeat converges), a
 * capped LIST of log lines, and ZSET indexes newest-first — global, per rebuild, per rebuild and
 * tenant, per status — so every listing is O(page). Writes are folded into one MULTI each.
 */
import type { ChainableCommander, Redis } from "ioredis";
import { appendEventInto } from "../events/publish";
import type { RedisKeys } from "../redis/keys";
import { RUN_STATUSES, type RunRecord, type RunStatus, type StepRecord } from "./types";

/** Log lines kept per run (the newest). */
export const RUN_LOG_LINES = 500;

export interface RunRetention {
  /** Records kept per rebuild (and per rebuild+tenant). */
  maxPerRebuild: number;
  maxAgeMs: number;
}

export const DEFAULT_RETENTION: RunRetention = { maxPerRebuild: 10_000, maxAgeMs: 30 * 86_400_000 };

/** Backstop expiry of a record and its log: trimming normally removes them first. */
export const recordTtlMs = (retention: RunRetention) => retention.maxAgeMs + 86_400_000;

type RunClient = Pick<Redis, "multi" | "hgetall" | "lrange" | "pipeline">;

export function toFields(record: Partial<RunRecord>): Record<string, string> {
  const fields: Record<string, string> = {};
  for (const [key, value] of Object.entries(record)) {
    if (value === undefined) continue;
    fields[key] = key === "steps" ? JSON.stringify(value) : value === null ? "" : String(value);
  }
  return fields;
}

const num = (raw: string | undefined) => (raw === undefined || raw === "" ? null : Number(raw));
const str = (raw: string | undefined) => (raw === undefined || raw === "" ? null : raw);

export function fromFields(hash: Record<string, string>): RunRecord | null {
  if (!hash.id) return null;
  let steps: StepRecord[];
  try {
    steps = hash.steps ? (JSON.parse(hash.steps) as StepRecord[]) : [];
  } catch {
    steps = [];
  }
  return {
    id: hash.id,
    jobId: hash.jobId ?? "",
    attempt: Number(hash.attempt ?? 0),
    rebuild: hash.rebuild ?? "",
    tenant: str(hash.tenant),
    version: str(hash.version),
    status: (hash.status ?? "queued") as RunStatus,
    reason: str(hash.reason),
    trigger: (hash.trigger ?? "api") as RunRecord["trigger"],
    workerId: str(hash.workerId),
    host: str(hash.host),
    createdAt: Number(hash.createdAt ?? 0),
    startedAt: num(hash.startedAt),
    finishedAt: num(hash.finishedAt),
    durationMs: num(hash.durationMs),
    fence: num(hash.fence),
    buildHash: str(hash.buildHash),
    idempotencyKey: str(hash.idempotencyKey),
    progress: Number(hash.progress ?? 0),
    steps,
  };
}

/** Index keys a run belongs to (status excluded; status indexes move with the status). */
export function indexKeys(keys: RedisKeys, rebuild: string, tenant: string | null): string[] {
  const list = [keys.runIndex(), keys.runIndex({ rebuild })];
  if (tenant) list.push(keys.runIndex({ rebuild, tenant }));
  return list;
}

/** The status indexes a run is in: by status alone, and within its rebuild (and tenant). */
export function statusIndexKeys(keys: RedisKeys, rebuild: string, tenant: string | null, status: string): string[] {
  const list = [keys.runIndex({ status }), keys.runIndex({ rebuild, status })];
  if (tenant) list.push(keys.runIndex({ rebuild, tenant, status }));
  return list;
}

/**
 * Queues the commands that create or update a run inside `tx`. A new record is indexed at its
 * `createdAt`; an existing one keeps its place. A write that carries a status puts the run in
 * that status's indexes and takes it out of every other status's — not only the one the writer
 * last knew — so two writers racing on one run (a paused attempt waking up, the next attempt
 * closing it as abandoned) leave it in exactly one status index: the one its hash says, since
 * the last MULTI to run writes both.
 */
export function upsertRunInto(
  tx: ChainableCommander,
  keys: RedisKeys,
  record: Pick<RunRecord, "id" | "rebuild" | "tenant" | "createdAt"> & Partial<RunRecord>,
  retention: RunRetention = DEFAULT_RETENTION,
): ChainableCommander {
  const key = keys.run(record.id);
  tx.hset(key, toFields(record));
  tx.pexpire(key, recordTtlMs(retention));
  for (const index of indexKeys(keys, record.rebuild, record.tenant)) tx.zadd(index, "NX", record.createdAt, record.id);
  if (record.status) {
    for (const status of RUN_STATUSES) {
      for (const index of statusIndexKeys(keys, record.rebuild, record.tenant, status)) {
        if (status === record.status) tx.zadd(index, record.createdAt, record.id);
        else tx.zrem(index, record.id);
      }
    }
  }
  // The dashboard's live event, in the same MULTI as the change it reports (lib/events).
  appendEventInto(tx, keys, { type: "run", run: record });
  return tx;
}

export async function upsertRun(
  client: Pick<Redis, "multi">,
  keys: RedisKeys,
  record: Pick<RunRecord, "id" | "rebuild" | "tenant" | "createdAt"> & Partial<RunRecord>,
): Promise<void> {
  await upsertRunInto(client.multi(), keys, record).exec();
}

export async function readRun(client: RunClient, keys: RedisKeys, runId: string): Promise<RunRecord | null> {
  return fromFields(await client.hgetall(keys.run(runId)));
}

export async function readRunLog(
  client: RunClient,
  keys: RedisKeys,
  runId: string,
  tail = RUN_LOG_LINES,
): Promise<string[]> {
  return client.lrange(keys.runLog(runId), -tail, -1);
}

/**
 * Buffers log lines and writes them in batches (RPUSH + LTRIM), so a chatty step costs one round
 * trip per flush, not per line.
 */
export class RunLogWriter {
  private pending: string[] = [];
  private timer: NodeJS.Timeout | undefined;
  private flushing: Promise<void> = Promise.resolve();

  constructor(
    private readonly client: Pick<Redis, "multi">,
    private readonly keys: RedisKeys,
    private readonly runId: string,
    private readonly retention: RunRetention = DEFAULT_RETENTION,
    private readonly flushEveryMs = 500,
  ) {}

  append(line: string): void {
    this.pending.push(`${new Date().toISOString()} ${line}`);
    if (this.pending.length > RUN_LOG_LINES) this.pending.splice(0, this.pending.length - RUN_LOG_LINES);
    this.timer ??= setTimeout(() => void this.flush(), this.flushEveryMs);
  }

  flush(): Promise<void> {
    const lines = this.takePending();
    if (lines.length === 0) return this.flushing;
    this.flushing = this.flushing.then(async () => {
      try {
        await this.queueLines(this.client.multi(), lines).exec();
      } catch {
        // A log line is not worth failing a rebuild for; the run record carries the outcome.
      }
    });
    return this.flushing;
  }

  /** Resolves when no flush is in flight, counting flushes a timer starts meanwhile. */
  async settled(): Promise<void> {
    let flushing;
    do {
      flushing = this.flushing;
      await flushing;
    } while (flushing !== this.flushing);
  }

  /**
   * Queues the pending lines into `tx` instead of a MULTI of their own: the final run record
   * and its last log lines then cost one round trip. Call right after `settled()` (no timer can
   * run in between), so the lines land after every earlier flush; the caller's `exec` decides
   * what a failure means.
   */
  drainInto(tx: ChainableCommander): ChainableCommander {
    const lines = this.takePending();
    return lines.length === 0 ? tx : this.queueLines(tx, lines);
  }

  private takePending(): string[] {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    const lines = this.pending;
    this.pending = [];
    return lines;
  }

  private queueLines(tx: ChainableCommander, lines: string[]): ChainableCommander {
    const key = this.keys.runLog(this.runId);
    tx.rpush(key, ...lines)
      .ltrim(key, -RUN_LOG_LINES, -1)
      .pexpire(key, recordTtlMs(this.retention));
    return appendEventInto(tx, this.keys, { type: "run.log", id: this.runId });
  }
}

/**
 * Trims run records of one rebuild (and tenant) by count and age, deleting the records and
 * their logs from every index. Bounded work per call (`batch`); callers run it now and then.
 */
export async function trimRuns(
  client: Pick<Redis, "zrangebyscore" | "zrange" | "zcard" | "multi" | "pipeline">,
  keys: RedisKeys,
  rebuild: string,
  tenant: string | null,
  retention: RunRetention = DEFAULT_RETENTION,
  now = Date.now(),
  batch = 500,
): Promise<number> {
  const index = keys.runIndex(tenant ? { rebuild, tenant } : { rebuild });
  const old = await client.zrangebyscore(index, "-inf", now - retention.maxAgeMs, "LIMIT", 0, batch);
  const excess = Math.min(batch, Math.max(0, (await client.zcard(index)) - retention.maxPerRebuild));
  const overflow = excess > 0 ? await client.zrange(index, "0", String(excess - 1)) : [];
  const victims = [...new Set([...old, ...overflow])];
  if (victims.length === 0) return 0;

  const lookup = client.pipeline();
  for (const id of victims) lookup.hget(keys.run(id), "tenant");
  const replies = (await lookup.exec()) ?? [];
  const tx = client.multi();
  victims.forEach((id, i) => {
    // A record whose hash already expired has no fields left: the index it was found in says
    // its tenant.
    const runTenant = (replies[i]?.[1] as string | null | undefined) || tenant;
    tx.del(keys.run(id), keys.runLog(id));
    for (const key of indexKeys(keys, rebuild, runTenant)) tx.zrem(key, id);
    // Every status, not only the hash's: an expired hash has none, and a status write may race
    // this trim.
    for (const status of RUN_STATUSES) {
      for (const key of statusIndexKeys(keys, rebuild, runTenant, status)) tx.zrem(key, id);
    }
  });
  await tx.exec();
  return victims.length;
}

/** Trims every rebuild's (and tenant's) run records; run by each worker on its heartbeat. */
export async function trimAllRuns(
  client: Parameters<typeof trimRuns>[0],
  keys: RedisKeys,
  definitions: { rebuilds: Map<string, { name: string; tenants?: string[] | undefined }> },
  retention: RunRetention = DEFAULT_RETENTION,
): Promise<number> {
  let removed = 0;
  for (const rebuild of definitions.rebuilds.values()) {
    removed += await trimRuns(client, keys, rebuild.name, null, retention);
    for (const tenant of rebuild.tenants ?? [])
      removed += await trimRuns(client, keys, rebuild.name, tenant, retention);
  }
  return removed;
}
