/**
 * Run records for tests and benches that show the dashboard a run without a worker: through the
 * record writer (lib/runs/writer.ts) — so the status moves are the real ones and the live stream
 * gets its events — or, for finished history, `importRunInto` (seeding, no events).
 */
import type { ChainableCommander, Redis } from "ioredis";
import type { RedisKeys } from "../../lib/redis/keys";
import { DEFAULT_RETENTION } from "../../lib/runs/records";
import type { FinalRunStatus } from "../../lib/runs/transitions";
import type { RunRecord } from "../../lib/runs/types";
import { beginAttempt, importRunInto, writeRun, type AttemptIdentity } from "../../lib/runs/writer";
import { idempotencyKey } from "../../lib/rebuilds/version";

type Partial_ = Pick<RunRecord, "id" | "rebuild" | "tenant" | "createdAt" | "status"> & Partial<RunRecord>;

function fullRecord(record: Partial_): RunRecord {
  return {
    jobId: record.id.replace(/-a\d+$/, ""),
    attempt: 1,
    version: null,
    reason: null,
    trigger: "api",
    workerId: null,
    host: null,
    startedAt: null,
    finishedAt: null,
    durationMs: null,
    fence: null,
    buildHash: null,
    idempotencyKey: null,
    progress: 1,
    steps: [],
    ...record,
  };
}

/**
 * Queues a record into `tx` as it is (history for charts and lists; a `running` one stands for a
 * run in flight without an attempt behind it — seeding only, its moves are not checked).
 */
export function seedRunInto(tx: ChainableCommander, keys: RedisKeys, record: Partial_) {
  const full = fullRecord(record) as RunRecord & { status: FinalRunStatus };
  return importRunInto(tx, keys, full, DEFAULT_RETENTION);
}

/**
 * Begins a run (`running`) or moves it to a final status, as a worker's writer would: the record
 * and the live stream's event. A final status for a run that never began begins and ends it.
 */
export async function writeTestRun(client: Redis, keys: RedisKeys, record: Partial_): Promise<void> {
  const full = fullRecord(record);
  const store = { client, keys, retention: DEFAULT_RETENTION };
  const place = { rebuild: full.rebuild, tenant: full.tenant };
  const identity = {
    ...place,
    runId: full.id,
    jobId: full.jobId,
    attempt: full.attempt,
    previousRunId: null,
    rebuildName: full.rebuild,
    createdAt: full.createdAt,
    trigger: full.trigger,
    workerId: full.workerId ?? "test",
    host: full.host ?? "test",
  };
  const { id: _id, status, ...fields } = record;
  if (status === "running" || status === "queued") {
    await beginAttempt(store, identity, { mode: { kind: "running" }, fields });
    return;
  }
  const written = await writeRun(store, { ...place, runId: full.id, jobId: full.jobId }, { status, fields });
  if (written === "missing") {
    await beginAttempt(store, identity, { mode: { kind: "final", status, reason: full.reason ?? "" }, fields });
  }
}

/**
 * `beginAttempt`, its result without the per-call `beginId` (checked to be there): for tests that
 * compare the rest of the result whole.
 */
export async function beginAttemptResult(
  ...args: Parameters<typeof beginAttempt>
): Promise<Omit<Awaited<ReturnType<typeof beginAttempt>>, "beginId">> {
  const { beginId, ...result } = await beginAttempt(...args);
  if (!/^[0-9a-f]{8}[0-9a-z]+$/.test(beginId)) throw new Error(`beginAttempt answered beginId ${beginId}`);
  return result;
}

/** The lane (output claim name) of `testAttempt`'s attempts: keys.rebuiltNow(TEST_LANE). */
export const TEST_LANE = "tenant:acme:output:/srv/tiles";

/**
 * Attempt `n` of job `jobId` (run id `<jobId>-a<n>`, the one before it as its previous run): of
 * rebuild `tiles` for tenant `acme` (lane TEST_LANE), by worker `w1` on host `h`, unless
 * `overrides` says otherwise.
 */
export function testAttempt(jobId: string, n: number, overrides: Partial<AttemptIdentity> = {}): AttemptIdentity {
  return {
    runId: `${jobId}-a${n}`,
    jobId,
    attempt: n,
    previousRunId: n > 1 ? `${jobId}-a${n - 1}` : null,
    rebuild: "tiles",
    tenant: "acme",
    lane: TEST_LANE,
    rebuildName: "tiles",
    createdAt: 1_000,
    trigger: "api",
    workerId: "w1",
    host: "h",
    ...overrides,
  };
}

/**
 * Marks `version` of (rebuild, tenant) rebuilt by `runId` as a publish's own final write under
 * its claim does (lib/runs/scripts.ts, lanePublished with 'held'): the idempotency key, and its
 * lane naming it, marked in this incarnation of the Redis — a mark RUN_BEGIN and the check under
 * the claim count without asking the claims Redis.
 */
export async function markRebuilt(
  main: Redis,
  keys: RedisKeys,
  lane: { rebuild: string; tenant?: string; version: string; claim: string },
  runId: string,
  ttlMs = 60_000,
): Promise<void> {
  const key = keys.idempotency(idempotencyKey(lane.rebuild, lane.tenant, lane.version));
  // As REBUILT_MARK_LUA's incarnation(): the server's run_id and its replication id.
  const serverId = /run_id:(\w+)/.exec(await main.info("server"))?.[1];
  const replId = /master_replid:(\w+)/.exec(await main.info("replication"))?.[1];
  const incarnation = serverId && replId ? `${serverId}:${replId}` : "?";
  await main
    .multi()
    .set(key, runId, "PX", ttlMs)
    .hset(keys.rebuiltNow(lane.claim), "key", key, "markedIn", incarnation)
    .pexpire(keys.rebuiltNow(lane.claim), ttlMs)
    .exec();
}
