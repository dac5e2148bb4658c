/**
 * `npm run web`: the dashboard alone, e.g. on another machine against a shared REDIS_URL.
 * Without REDIS_URL it uses the embedded Redis of a running `npm start` in the same data dir.
 */
import path from "node:path";
import { fileURLToPath } from "node:url";
import { CONFIG_EXIT_CODE, loadConfigOrExit } from "../lib/config";
import { resolveRedisUrls, RedisNotConfiguredError } from "../lib/redis/connections";
import { browserUrl, ensureBuild, startWeb, waitForHttp } from "../lib/launcher/children";
import { exitUnlessListenable } from "../lib/launcher/listen-check";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const say = (line: string) => process.stdout.write(`[claimwatch-web] ${line}\n`);

const config = loadConfigOrExit("claimwatch-web");
let redisUrl: string;
try {
  redisUrl = resolveRedisUrls(config).main;
} catch (error) {
  if (!(error instanceof RedisNotConfiguredError)) throw error;
  process.stderr.write(`[claimwatch-web] ${error.message}\n`);
  process.exit(CONFIG_EXIT_CODE);
}
await exitUnlessListenable("claimwatch-web", config.host, config.port);
if (!ensureBuild(root, say)) process.exit(1);

const web = startWeb(root, config, { ...process.env, REDIS_URL: redisUrl });
const stop = async () => {
  await web.stop(10_000);
  process.exit(0);
};
process.on("SIGINT", () => void stop());
process.on("SIGTERM", () => void stop());
void web.exited.then(({ code }) => process.exit(code ?? 1));
let exited = false;
void web.exited.then(() => (exited = true));
if (await waitForHttp(`${browserUrl(config)}/api/health`, () => exited, 60_000)) {
  say(`dashboard at ${browserUrl(config)}`);
}
