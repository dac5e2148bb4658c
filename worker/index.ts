/**
 * The worker process (`npm run worker`; `npm start` runs one). Connects to Redis, announces
 * itself with a heartbeat and waits for rebuild jobs. SIGTERM/SIGINT: retire and exit 0.
 */
import { loadConfigOrExit, CONFIG_EXIT_CODE } from "../lib/config";
import { createRedis, closeRedis } from "../lib/redis/client";
import { redisKeys } from "../lib/redis/keys";
import { resolveRedisUrls, RedisNotConfiguredError } from "../lib/redis/connections";
import { beat, newWorkerIdentity, retire, HEARTBEAT_EVERY_MS } from "../lib/workers/heartbeat";
import { describeError } from "../lib/health/redis-safety";
import { APP_VERSION } from "../lib/version";

const config = loadConfigOrExit("claimwatch-worker");
let urls;
try {
  urls = resolveRedisUrls(config);
} catch (error) {
  if (!(error instanceof RedisNotConfiguredError)) throw error;
  process.stderr.write(`claimwatch-worker: ${error.message}\n`);
  process.exit(CONFIG_EXIT_CODE);
}

const keys = redisKeys(config.keyPrefix);
const redis = createRedis(urls.main, "worker", "claimwatch-worker");
const identity = newWorkerIdentity(APP_VERSION);
const log = (line: string) => process.stdout.write(`[worker ${identity.id}] ${line}\n`);

let lastBeatFailed = false;
async function heartbeat(): Promise<void> {
  try {
    await beat(redis, keys, identity, null);
    if (lastBeatFailed) log("heartbeat restored");
    lastBeatFailed = false;
  } catch (error) {
    if (!lastBeatFailed) log(`heartbeat failed (will keep trying): ${describeError(error)}`);
    lastBeatFailed = true;
  }
}

await heartbeat();
const timer = setInterval(() => void heartbeat(), HEARTBEAT_EVERY_MS);
log(`connected to ${new URL(urls.main).host}; waiting for rebuild jobs`);

let stopping = false;
async function shutdown(signal: NodeJS.Signals): Promise<void> {
  if (stopping) return;
  stopping = true;
  log(`${signal}: stopping`);
  clearInterval(timer);
  try {
    await Promise.race([retire(redis, keys, identity.id), new Promise((r) => setTimeout(r, 2_000))]);
  } catch {
    // Redis gone: the heartbeat expires by itself.
  }
  await closeRedis(redis);
  process.exit(0);
}
process.on("SIGTERM", (signal) => void shutdown(signal));
process.on("SIGINT", (signal) => void shutdown(signal));
