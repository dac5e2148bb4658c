/**
 * Benchmark (not a test): serial acquire+release cycles per second of
 *   claim     — claimwatch's acquireClaim + releaseClaim (fence, metadata, registry inside the scripts)
 *   claimLive — the same with the live events the worker's claims write (claim.acquired and
 *               claim.released, an XADD in each script)
 *   minimal   — `SET key token NX PX ttl` + Lua compare-and-delete
 *   semaphore — redis-semaphore's Mutex acquire/release
 *   floor     — the least any claim the issue specifies can do, as two scripts: SET NX PX + fence
 *               INCR + registry ZADD; GET + DEL + ZREM (no metadata, no takeover, no checks):
 *               what claimwatch's scripts could at best shrink to
 *   floorMeta — the floor plus the metadata the issue requires, in the cheapest place found: the
 *               claim's own value (`<token>\n<holder JSON>`, owner check on the token prefix)
 *   floorTrail — floorMeta plus the two writes later issues require of every claim and floorMeta
 *               leaves out, each as one plain command in the same two scripts: the claim's trail
 *               (XADD "acquired"; XADD "released" to the trail and to the recently-ended stream)
 *               and the refreshes index the alert census reads (ZADD at the Redis time; ZREM).
 *               The least any claim with those features can cost: what the claim is judged against
 *               once the features are counted (`claim_vs_floor_trail=`)
 * on one redis-server this script starts (temp dir, stopped by PID), over one connection.
 * Rounds of all variants are interleaved, in rotating order, so drift (CPU frequency, other load)
 * hits all of them alike. Goal: claim ≥ 0.90 × minimal (both are two round trips).
 *
 * Redis runs without persistence (BENCH_AOF=1: with AOF everysec, as the embedded claims Redis
 * runs), so the figures measure the code paths rather than the disk.
 *
 * Env: BENCH_ROUNDS (default 12), BENCH_CYCLES per round and variant (default 1000), BENCH_AOF.
 * Last line: RESULT claim_vs_minimal=<ratio> claim_vs_semaphore=<ratio> floor_vs_minimal=<ratio>
 * floor_meta_vs_minimal=<ratio> claim_vs_floor_meta=<ratio> claim_live_vs_floor_meta=<ratio>
 * floor_trail_vs_floor_meta=<ratio> claim_vs_floor_trail=<ratio> … (ratios of total
 * cycles/s over all rounds; the median of per-round ratios is printed above it).
 */
import crypto from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { Redis } from "ioredis";
import { Mutex } from "redis-semaphore";
import { acquireClaim, claimName, releaseClaim } from "../lib/claims/index";
import { newClaimToken } from "../lib/claims/token";
import { startRedisServer } from "../lib/redis/embedded";
import { redisKeys } from "../lib/redis/keys";
import { numberFromEnv } from "./env";

const ROUNDS = numberFromEnv("BENCH_ROUNDS", 12, { min: 1 });
const CYCLES = numberFromEnv("BENCH_CYCLES", 1_000, { min: 1 });
const AOF = process.env.BENCH_AOF === "1";
const TTL_MS = 30_000;

const MINIMAL_DEL_IF_EQUAL = `
--[[ KEYS[1] lock   ARGV[1] token   Returns 1 deleted | 0 not the owner ]]
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`;

/** The required work without metadata: the floor for any implementation of it. */
const FLOOR_ACQUIRE = `
--[[ KEYS[1] claim   KEYS[2] fence   KEYS[3] registry   ARGV[1] token   ARGV[2] ttlMs   ARGV[3] name
Returns the fence | false (held) ]]
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return false end
local fence = redis.call('INCR', KEYS[2])
redis.call('ZADD', KEYS[3], 0, ARGV[3])
return fence
`;
const FLOOR_RELEASE = `
--[[ KEYS[1] claim   KEYS[2] registry   ARGV[1] token   ARGV[2] name   Returns 1 released | 0 not the owner ]]
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[2])
return 1
`;

/** The floor's release for a value that carries metadata after the token. */
const FLOOR_META_RELEASE = `
--[[ KEYS[1] claim   KEYS[2] registry   ARGV[1] token   ARGV[2] name   Returns 1 released | 0 not the owner ]]
local value = redis.call('GET', KEYS[1])
if not value or string.sub(value, 1, #ARGV[1] + 1) ~= ARGV[1] .. '\\n' then return 0 end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[2])
return 1
`;

/** floorMeta's acquire plus the trail entry and the refreshes index (see the header). */
const FLOOR_TRAIL_ACQUIRE = `
--[[ KEYS[1] claim  KEYS[2] fence  KEYS[3] registry  KEYS[4] trail  KEYS[5] refreshes
ARGV[1] value (token \\n holder JSON)  ARGV[2] ttlMs  ARGV[3] name  ARGV[4] holder JSON   Returns the fence | false ]]
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return false end
local fence = redis.call('INCR', KEYS[2])
redis.call('ZADD', KEYS[3], 0, ARGV[3])
local t = redis.call('TIME')
redis.call('ZADD', KEYS[5], t[1] * 1000 + math.floor(t[2] / 1000), ARGV[3])
redis.call('XADD', KEYS[4], 'MAXLEN', '~', 50, '*', 'e', 'acquired', 'n', ARGV[3], 'f', fence, 'h', ARGV[4], 'ms', ARGV[2])
return fence
`;
const FLOOR_TRAIL_RELEASE = `
--[[ KEYS[1] claim  KEYS[2] registry  KEYS[3] trail  KEYS[4] ended  KEYS[5] refreshes
ARGV[1] token  ARGV[2] name   Returns 1 released | 0 not the owner ]]
local value = redis.call('GET', KEYS[1])
if not value or string.sub(value, 1, #ARGV[1] + 1) ~= ARGV[1] .. '\\n' then return 0 end
local holder = string.sub(value, #ARGV[1] + 2)
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[2])
redis.call('ZREM', KEYS[5], ARGV[2])
redis.call('XADD', KEYS[3], 'MAXLEN', '~', 50, '*', 'e', 'released', 'n', ARGV[2], 'h', holder)
redis.call('XADD', KEYS[4], 'MAXLEN', '~', 200, '*', 'e', 'released', 'n', ARGV[2], 'h', holder)
return 1
`;

type Cycle = () => Promise<void>;

function variants(
  client: Redis,
): Record<"claim" | "claimLive" | "minimal" | "semaphore" | "floor" | "floorMeta" | "floorTrail", Cycle> {
  const keys = redisKeys("bench");
  const name = claimName("bench/output", "bench-tenant");
  const meta = { workerId: "bench-worker", jobId: "", runId: "bench-run", rebuild: "bench", version: "0.0.0" };
  const timing = { ttlMs: TTL_MS, refreshEveryMs: 10_000 };
  client.defineCommand("benchDelIfEqual", { numberOfKeys: 1, lua: MINIMAL_DEL_IF_EQUAL });
  const delIfEqual = (key: string, token: string) =>
    (client as unknown as { benchDelIfEqual(k: string, t: string): Promise<number> }).benchDelIfEqual(key, token);
  client.defineCommand("benchFloorAcquire", { numberOfKeys: 3, lua: FLOOR_ACQUIRE });
  client.defineCommand("benchFloorRelease", { numberOfKeys: 2, lua: FLOOR_RELEASE });
  client.defineCommand("benchFloorMetaRelease", { numberOfKeys: 2, lua: FLOOR_META_RELEASE });
  client.defineCommand("benchFloorTrailAcquire", { numberOfKeys: 5, lua: FLOOR_TRAIL_ACQUIRE });
  client.defineCommand("benchFloorTrailRelease", { numberOfKeys: 5, lua: FLOOR_TRAIL_RELEASE });
  const floor = client as unknown as {
    benchFloorTrailAcquire(...keysThenArgs: (string | number)[]): Promise<number | null>;
    benchFloorTrailRelease(...keysThenArgs: string[]): Promise<number>;
    benchFloorAcquire(...keysThenArgs: (string | number)[]): Promise<number | null>;
    benchFloorRelease(...keysThenArgs: string[]): Promise<number>;
    benchFloorMetaRelease(...keysThenArgs: string[]): Promise<number>;
  };
  const holder = { host: os.hostname(), pid: process.pid, ...meta, tenant: "bench-tenant", ...timing };
  const minimalKey = "{bench}:minimal";
  const semaphoreKey = "{bench}:semaphore";

  return {
    async claim() {
      const grant = await acquireClaim(client, keys, name, meta, timing);
      if (grant.status !== "acquired") throw new Error(`claim: not acquired (${grant.status})`);
      const release = await releaseClaim(client, keys, name, grant.token);
      if (release.status !== "released") throw new Error(`claim: release ${release.status}`);
    },
    async claimLive() {
      const grant = await acquireClaim(client, keys, name, meta, timing, { liveEvent: true });
      if (grant.status !== "acquired") throw new Error(`claimLive: not acquired (${grant.status})`);
      const release = await releaseClaim(client, keys, name, grant.token, { liveEvent: true });
      if (release.status !== "released") throw new Error(`claimLive: release ${release.status}`);
    },
    async minimal() {
      const token = crypto.randomUUID();
      if ((await client.set(minimalKey, token, "PX", TTL_MS, "NX")) !== "OK") throw new Error("minimal: not acquired");
      if ((await delIfEqual(minimalKey, token)) !== 1) throw new Error("minimal: not released");
    },
    async floor() {
      const token = newClaimToken();
      const [claim, fence, registry] = ["{bench}:floor-claim", "{bench}:floor-fence", "{bench}:floor-registry"];
      if ((await floor.benchFloorAcquire(claim, fence, registry, token, TTL_MS, name)) === null) {
        throw new Error("floor: not acquired");
      }
      if ((await floor.benchFloorRelease(claim, registry, token, name)) !== 1) throw new Error("floor: not released");
    },
    async floorMeta() {
      const token = newClaimToken();
      const value = `${token}\n${JSON.stringify({ ...holder, acquiredAt: Date.now() })}`;
      const [claim, fence, registry] = ["{bench}:meta-claim", "{bench}:meta-fence", "{bench}:meta-registry"];
      if ((await floor.benchFloorAcquire(claim, fence, registry, value, TTL_MS, name)) === null) {
        throw new Error("floorMeta: not acquired");
      }
      if ((await floor.benchFloorMetaRelease(claim, registry, token, name)) !== 1) {
        throw new Error("floorMeta: not released");
      }
    },
    async floorTrail() {
      const token = newClaimToken();
      const holderJson = JSON.stringify({ ...holder, acquiredAt: Date.now() });
      const value = `${token}\n${holderJson}`;
      const [claim, fence, registry, trail, ended, refreshes] = [
        "{bench}:trail-claim",
        "{bench}:trail-fence",
        "{bench}:trail-registry",
        "{bench}:trail-trail",
        "{bench}:trail-ended",
        "{bench}:trail-refreshes",
      ];
      if (
        (await floor.benchFloorTrailAcquire(
          claim,
          fence,
          registry,
          trail,
          refreshes,
          value,
          TTL_MS,
          name,
          holderJson,
        )) === null
      ) {
        throw new Error("floorTrail: not acquired");
      }
      if ((await floor.benchFloorTrailRelease(claim, registry, trail, ended, refreshes, token, name)) !== 1) {
        throw new Error("floorTrail: not released");
      }
    },
    async semaphore() {
      const mutex = new Mutex(client, semaphoreKey, { lockTimeout: TTL_MS, acquireAttemptsLimit: 1 });
      await mutex.acquire();
      await mutex.release();
    },
  };
}

async function timeCycles(cycle: Cycle, count: number): Promise<number> {
  const started = performance.now();
  for (let i = 0; i < count; i++) await cycle();
  return performance.now() - started;
}

const median = (values: number[]) => {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
};

async function main(): Promise<void> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "claimwatch-bench-"));
  const server = await startRedisServer({ dir, extraArgs: AOF ? [] : ["--appendonly", "no", "--save", ""] });
  const client = new Redis(server.url);
  client.on("error", () => {});
  try {
    const cycles = variants(client);
    const names = Object.keys(cycles) as Array<keyof typeof cycles>;
    console.log(
      `redis-server pid ${server.pid} on ${server.url} (${AOF ? "AOF everysec" : "no persistence"}); ` +
        `${ROUNDS} rounds × ${CYCLES} cycles per variant, interleaved`,
    );
    for (const variant of names) await timeCycles(cycles[variant], Math.min(CYCLES, 500)); // warm-up (scripts, JIT)

    const totalMs = Object.fromEntries(names.map((n) => [n, 0])) as Record<(typeof names)[number], number>;
    const perRound = Object.fromEntries(names.map((n) => [n, [] as number[]])) as Record<
      (typeof names)[number],
      number[]
    >;
    for (let round = 0; round < ROUNDS; round++) {
      const order = names.map((_, i) => names[(i + round) % names.length]!);
      for (const variant of order) {
        const elapsed = await timeCycles(cycles[variant], CYCLES);
        totalMs[variant] += elapsed;
        perRound[variant].push((CYCLES * 1000) / elapsed);
      }
    }

    const cps = (variant: (typeof names)[number]) => (ROUNDS * CYCLES * 1000) / totalMs[variant];
    for (const variant of names) {
      const rounds = perRound[variant];
      console.log(
        `${variant.padEnd(10)} ${cps(variant).toFixed(0).padStart(7)} cycles/s  ` +
          `(median round ${median(rounds).toFixed(0)}, min ${Math.min(...rounds).toFixed(0)}, max ${Math.max(...rounds).toFixed(0)}; ` +
          `${((1000 / cps(variant)) * 1000).toFixed(1)} µs/cycle)`,
      );
    }
    const roundRatio = (other: (typeof names)[number]) =>
      median(perRound.claim.map((claimCps, round) => claimCps / perRound[other][round]!));
    console.log(
      `median per-round ratio: claim/minimal ${roundRatio("minimal").toFixed(3)}, ` +
        `claim/semaphore ${roundRatio("semaphore").toFixed(3)}; ` +
        `floor/minimal ${median(perRound.floor.map((floorCps, round) => floorCps / perRound.minimal[round]!)).toFixed(3)}, ` +
        `floorMeta/minimal ${median(perRound.floorMeta.map((c, round) => c / perRound.minimal[round]!)).toFixed(3)}`,
    );
    const vsMinimal = cps("claim") / cps("minimal");
    const vsSemaphore = cps("claim") / cps("semaphore");
    console.log(
      `RESULT claim_vs_minimal=${vsMinimal.toFixed(3)} claim_vs_semaphore=${vsSemaphore.toFixed(3)} ` +
        `floor_vs_minimal=${(cps("floor") / cps("minimal")).toFixed(3)} ` +
        `floor_meta_vs_minimal=${(cps("floorMeta") / cps("minimal")).toFixed(3)} ` +
        `claim_vs_floor_meta=${(cps("claim") / cps("floorMeta")).toFixed(3)} ` +
        `claim_live_vs_floor_meta=${(cps("claimLive") / cps("floorMeta")).toFixed(3)} ` +
        `floor_trail_vs_floor_meta=${(cps("floorTrail") / cps("floorMeta")).toFixed(3)} ` +
        `claim_vs_floor_trail=${(cps("claim") / cps("floorTrail")).toFixed(3)} ` +
        `claim_cps=${cps("claim").toFixed(0)} minimal_cps=${cps("minimal").toFixed(0)} semaphore_cps=${cps("semaphore").toFixed(0)}`,
    );
  } finally {
    client.disconnect();
    await server.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

await main();
