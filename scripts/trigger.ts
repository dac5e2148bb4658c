/**
 * `npm run trigger -- <rebuild> [--tenant T] [--version V] [--force]`: queue a rebuild from the
 * command line (the dashboard's "Rebuild now" does the same through the API).
 */
import { parseArgs } from "node:util";
import { Queue } from "bullmq";
import { CONFIG_EXIT_CODE, loadConfigOrExit } from "../lib/config";
import { loadDefinitionsOrExit } from "../lib/rebuilds/definitions";
import { queuePrefix, REBUILD_QUEUE } from "../lib/rebuilds/queue";
import { triggerRebuild } from "../lib/rebuilds/trigger";
import { closeRedis, createRedis } from "../lib/redis/client";
import { redisKeys } from "../lib/redis/keys";
import { RedisNotConfiguredError, resolveRedisUrls } from "../lib/redis/connections";

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: { tenant: { type: "string" }, version: { type: "string" }, force: { type: "boolean", default: false } },
});
const name = positionals[0];
if (!name) {
  process.stderr.write("usage: npm run trigger -- <rebuild> [--tenant T] [--version V] [--force]\n");
  process.exit(64);
}
const config = loadConfigOrExit("claimwatch-trigger");
const definitions = loadDefinitionsOrExit(config.definitionsPath, "claimwatch-trigger");
let url: string;
try {
  url = resolveRedisUrls(config).main;
} catch (error) {
  if (!(error instanceof RedisNotConfiguredError)) throw error;
  process.stderr.write(`claimwatch-trigger: ${error.message}\n`);
  process.exit(CONFIG_EXIT_CODE);
}
const keys = redisKeys(config.keyPrefix);
const redis = createRedis(url, "web", "claimwatch-trigger");
const queue = new Queue(REBUILD_QUEUE, { connection: redis, prefix: queuePrefix(keys) });
const result = await triggerRebuild(queue, redis, keys, definitions, name, {
  tenant: values.tenant,
  version: values.version,
  force: values.force,
  trigger: "manual",
  requestedBy: `cli:${process.env.USER ?? "unknown"}`,
});
process.stdout.write(`${JSON.stringify(result)}\n`);
await queue.close();
await closeRedis(redis);
process.exit(result.status === "queued" || result.status === "deduplicated" ? 0 : 1);
