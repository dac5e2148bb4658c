/**
 * Benchmark (not a test) of run-record layouts in Redis memory: what would bring
 * `bytes_per_record` (bench:api, issue 13's goal ≤ 500 B) down, measured before anyone rewrites
 * the record scripts for it. It seeds the records bench:api seeds (bench/run-shape.ts) in each
 * layout into one redis-server this script starts (embedded settings, no persistence, stopped by
 * PID), FLUSHALL between layouts, and prints the `used_memory` delta ÷ records of each:
 *
 *   current          the worker's own writer (`importRunInto`): a HASH per run with a TTL, ZSET
 *                    indexes (all, rebuild, rebuild+tenant, and each of these by status), the
 *                    timeline counters (the layouts below leave the counters out: they grow with
 *                    lanes × hours, not with runs; `current_uncounted` is `current` without them)
 *   status_only      the same HASH, only the status-split indexes (a listing without a status merges
 *                    the nine statuses' indexes of its filter)
 *   streams          the same HASH, the indexes as STREAMs (append-only, an entry id is its time):
 *                    a small stream costs far more than a small ZSET, and most indexes are small
 *   compact          one packed field per run HASH (short fields; `durationMs`, `idempotencyKey`,
 *                    `id`, `jobId`, `attempt`, `progress` left out: derived from the key and the
 *                    other fields), ZSET indexes as today
 *   compact_chunked  compact records; each index cut into chunks of at most 100 entries (so every
 *                    chunk is a listpack: ~40 B an entry instead of ~120 B in a skiplist)
 *   leaf_zsets       the packed records as fields of one HASH per rebuild+tenant (no key, no TTL
 *                    per run), ZSET indexes as today
 *   leaf_chunked     leaf HASHes and chunked indexes
 *   leaf_one_zset    leaf HASHes and one ZSET entry per run (its rebuild+tenant+status index
 *                    only; every wider listing would merge leaves: not O(page))
 *
 * Only memory is measured; what each layout costs a listing, a trim or a status move is in
 * BENCHMARKS.md. Env: BENCH_RECORDS (default 200 000), BENCH_LAYOUTS (comma-separated names; all by default).
 * Last line: RESULT current_bpr=<bytes> current_uncounted_bpr=… status_only_bpr=… streams_bpr=… compact_bpr=… compact_chunked_bpr=…
 * leaf_zsets_bpr=… leaf_chunked_bpr=… leaf_one_zset_bpr=… records=<n>
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import type { ChainableCommander, Redis } from "ioredis";
import { closeRedis, createRedis } from "../lib/redis/client";
import { startRedisServer } from "../lib/redis/embedded";
import { redisKeys, type RedisKeys } from "../lib/redis/keys";
import { DEFAULT_RETENTION, indexLayout, recordTtlMs, runPlaceOf, toFields } from "../lib/runs/records";
import type { FinalRunStatus } from "../lib/runs/transitions";
import { RUN_STATUSES, type RunRecord } from "../lib/runs/types";
import { importRunInto } from "../lib/runs/writer";
import { runRecord } from "./run-shape";
import { numberFromEnv } from "./env";

const RECORDS = numberFromEnv("BENCH_RECORDS", 200_000, { min: 1 });
const BATCH = 500;
/** BENCH_LAYOUTS=current,status_only: only these layouts (all by default). */
const ONLY = (process.env.BENCH_LAYOUTS ?? "").split(",").filter(Boolean);

type Seeded = RunRecord & { status: FinalRunStatus };
type Layout = (tx: ChainableCommander, keys: RedisKeys, record: Seeded) => void;

/** The record in one string: the fields a reader cannot derive, in a fixed order, steps packed. */
function packed(record: Seeded): string {
  const started = record.startedAt ?? record.createdAt;
  const steps = record.steps
    .map(
      (step) =>
        `${step.name}:${step.status[0]}:${step.startedAt - started}:${(step.finishedAt ?? step.startedAt) - step.startedAt}`,
    )
    .join(",");
  return [
    record.rebuild,
    record.tenant ?? "",
    record.version ?? "",
    record.status,
    record.reason ?? "",
    record.trigger[0],
    record.workerId ?? "",
    record.host ?? "",
    record.createdAt,
    started - record.createdAt,
    (record.finishedAt ?? started) - started,
    record.fence ?? "",
    record.buildHash ?? "",
    steps,
  ].join("\u001f");
}

function zsetIndexes(tx: ChainableCommander, keys: RedisKeys, record: Seeded): void {
  const layout = indexLayout(keys, runPlaceOf(record.rebuild, record.tenant));
  const statusAt = RUN_STATUSES.indexOf(record.status);
  const score = record.startedAt ?? record.createdAt;
  for (let j = 0; j < layout.n; j++) {
    tx.zadd(layout.keys[j]!, score, record.id);
    tx.zadd(layout.keys[layout.n + statusAt * layout.n + j]!, score, record.id);
  }
}

function streamIndexes(tx: ChainableCommander, keys: RedisKeys, record: Seeded): void {
  const layout = indexLayout(keys, runPlaceOf(record.rebuild, record.tenant), [record.status]);
  for (const key of layout.keys) tx.xadd(key, "*", "r", record.id);
}

/** Entries per index chunk: under `zset-max-listpack-entries` (128), so each chunk is a listpack. */
const CHUNK = 100;
const chunkFill = new Map<string, number>();

/** The run's index entries in chunks of at most CHUNK per index (a new chunk key every CHUNK entries). */
function chunkedIndexes(tx: ChainableCommander, keys: RedisKeys, record: Seeded): void {
  const layout = indexLayout(keys, runPlaceOf(record.rebuild, record.tenant), [record.status]);
  for (const key of layout.keys) {
    const filled = chunkFill.get(key) ?? 0;
    chunkFill.set(key, filled + 1);
    tx.zadd(`${key}:c${Math.floor(filled / CHUNK)}`, record.startedAt ?? record.createdAt, record.id);
  }
}

const compactRecord: Layout = (tx, keys, record) => {
  tx.hset(keys.run(record.id), "v", packed(record));
  tx.pexpire(keys.run(record.id), recordTtlMs(DEFAULT_RETENTION));
};
const leafRecord: Layout = (tx, keys, record) => {
  tx.hset(`${keys.tag}:runs-leaf:${record.rebuild}:${record.tenant ?? ""}`, record.id, packed(record));
};

/** A layout that writes the record one way and its index entries another. */
const writing =
  (record: Layout, indexes: Layout): Layout =>
  (tx, keys, seeded) => {
    record(tx, keys, seeded);
    indexes(tx, keys, seeded);
  };

const hashRecord: Layout = (tx, keys, record) => {
  tx.hset(keys.run(record.id), toFields(record));
  tx.pexpire(keys.run(record.id), recordTtlMs(DEFAULT_RETENTION));
};

/** Only the run's rebuild+tenant+status index. */
const leafIndex: Layout = (tx, keys, record) => {
  const place = runPlaceOf(record.rebuild, record.tenant);
  tx.zadd(
    keys.runIndex({
      ...(place.rebuild ? { rebuild: place.rebuild } : {}),
      ...(place.tenant ? { tenant: place.tenant } : {}),
      status: record.status,
    }),
    record.startedAt ?? record.createdAt,
    record.id,
  );
};

/**
 * Only the status-split indexes (all runs, the rebuild, the rebuild+tenant, each by status): a
 * listing without a status would merge the nine statuses' indexes of its filter (still O(page)).
 */
const statusIndexes: Layout = (tx, keys, record) => {
  const layout = indexLayout(keys, runPlaceOf(record.rebuild, record.tenant), [record.status]);
  const score = record.startedAt ?? record.createdAt;
  for (const key of layout.keys.slice(layout.n)) tx.zadd(key, score, record.id);
};

const LAYOUTS: Record<string, Layout> = {
  current: (tx, keys, record) => importRunInto(tx, keys, record, DEFAULT_RETENTION),
  current_uncounted: (tx, keys, record) => importRunInto(tx, keys, record, DEFAULT_RETENTION, { uncounted: true }),
  status_only: writing(hashRecord, statusIndexes),
  streams: writing(hashRecord, streamIndexes),
  compact: writing(compactRecord, zsetIndexes),
  compact_chunked: writing(compactRecord, chunkedIndexes),
  leaf_zsets: writing(leafRecord, zsetIndexes),
  leaf_chunked: writing(leafRecord, chunkedIndexes),
  leaf_one_zset: writing(leafRecord, leafIndex),
};

async function usedMemory(client: Redis): Promise<number> {
  const info = await client.info("memory");
  return Number(/used_memory:(\d+)/.exec(info)![1]);
}

async function seed(client: Redis, keys: RedisKeys, layout: Layout): Promise<void> {
  const now = Date.now();
  for (let from = 0; from < RECORDS; from += BATCH) {
    const tx = client.pipeline();
    for (let i = from; i < Math.min(RECORDS, from + BATCH); i++) layout(tx, keys, runRecord(i, now));
    const failed = ((await tx.exec()) ?? []).find(([error]) => error);
    if (failed) throw failed[0];
  }
}

async function main(): Promise<void> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "claimwatch-bench-layout-"));
  const server = await startRedisServer({ dir, extraArgs: ["--appendonly", "no", "--save", ""] });
  const client = createRedis(server.url, "worker", "bench-layout");
  const keys = redisKeys("bench");
  const figures: string[] = [];
  try {
    console.log(`redis-server pid ${server.pid} on ${server.url}; ${RECORDS.toLocaleString("en")} records per layout`);
    for (const [name, layout] of Object.entries(LAYOUTS)) {
      if (ONLY.length > 0 && !ONLY.includes(name)) continue;
      await client.flushall();
      chunkFill.clear();
      const before = await usedMemory(client);
      const started = performance.now();
      await seed(client, keys, layout);
      const bytes = ((await usedMemory(client)) - before) / RECORDS;
      console.log(
        `${name.padEnd(16)} ${bytes.toFixed(0).padStart(5)} B per record (${(await client.dbsize()).toLocaleString("en")} keys, ` +
          `seeded in ${((performance.now() - started) / 1000).toFixed(1)} s)`,
      );
      figures.push(`${name}_bpr=${bytes.toFixed(0)}`);
    }
    console.log(`RESULT ${figures.join(" ")} records=${RECORDS}`);
  } finally {
    await closeRedis(client);
    await server.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

await main();
