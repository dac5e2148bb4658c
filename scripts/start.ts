/**
 * `npm start`: everything on one machine. Builds the dashboard when no build exists, starts the
 * embedded Redis (unless REDIS_URL is set), the Next.js server and one worker, prints the URL.
 * A child that exits on its own is started again (lib/launcher/restarts.ts: with a growing delay;
 * one that keeps exiting stops everything, exit 1). Ctrl-C or SIGTERM stops them in order —
 * worker, web, Redis — and exits 0.
 */
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { CONFIG_EXIT_CODE, loadConfigOrExit } from "../lib/config";
import { checkContainmentRequest, ContainmentConfigError } from "../lib/rebuilds/steps/containment";
import { ensureGeneratedOperatorToken, operatorTokenPath } from "../lib/auth/credentials";
import {
  loadDefinitions,
  loadDefinitionsOrExit,
  shutdownWaitMs,
  STOP_AFTER_JOBS_MS,
} from "../lib/rebuilds/definitions";
import {
  clearEmbeddedState,
  lastEmbeddedPort,
  readEmbeddedState,
  startRedisServer,
  writeEmbeddedState,
  type RedisServerHandle,
} from "../lib/redis/embedded";
import { ensureProgram, ProgramMissingError, REDIS_SERVER } from "../lib/system/packages";
import { exitUnlessListenable } from "../lib/launcher/listen-check";
import { browserUrl, ensureBuild, startWeb, startWorker, waitForHttp, workerArguments } from "../lib/launcher/children";
import { runningChild, runningRedis, Supervised } from "../lib/launcher/supervised";
import {
  clearLauncherState,
  currentBootId,
  isLauncherRunning,
  ownedProcess,
  readLauncherState,
  stopOrphans,
  writeLauncherState,
} from "../lib/launcher/state";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const say = (line: string) => process.stdout.write(`[claimwatch] ${line}\n`);
const fail = (line: string, code = 1): never => {
  process.stderr.write(`[claimwatch] ${line}\n`);
  process.exit(code);
};

const config = loadConfigOrExit("claimwatch");
// The worker's containment setting too, before anything starts (the host's probe is the worker's).
try {
  checkContainmentRequest();
} catch (error) {
  if (!(error instanceof ContainmentConfigError)) throw error;
  process.stderr.write(`claimwatch: configuration error: ${error.message}\n`);
  process.exit(CONFIG_EXIT_CODE);
}
const definitions = loadDefinitionsOrExit(config.definitionsPath, "claimwatch", config.definitionsSource);
process.env.NEXT_TELEMETRY_DISABLED = "1";

// A launcher that died without stopping its children (SIGKILL, OOM killer) left them running:
// stop exactly those (pid and start time recorded) before starting anew.
const previous = readLauncherState(config.dataDir);
if (previous) {
  if (isLauncherRunning(previous)) {
    fail(
      `another claimwatch is already using ${config.dataDir} (launcher pid ${previous.launcher.pid}); stop it first or set CLAIMWATCH_DATA_DIR`,
    );
  }
  const { stopped, stuck } = await stopOrphans(previous, 20_000);
  const list = (processes: typeof stopped) => processes.map((p) => `${p.name} (pid ${p.pid})`).join(", ");
  if (stopped.length > 0) {
    say(`stopped what a launcher that died (pid ${previous.launcher.pid}) left running: ${list(stopped)}`);
  }
  if (stuck.length > 0) fail(`these processes of a launcher that died did not stop even on SIGKILL: ${list(stuck)}`);
  if (stopped.some((p) => p.name === "redis")) clearEmbeddedState(config.dataDir);
  clearLauncherState(config.dataDir);
}

// Where the dashboard will listen, before anything starts (after the orphans: one may hold the port).
await exitUnlessListenable("claimwatch", config.host, config.port);
if (!ensureBuild(root, say)) fail("`next build` failed; see the output above");
// Before the embedded Redis starts: a stop while the worker's bundle builds leaves nothing running.
const workerNodeArguments = await workerArguments(say);

// A stop asked for while the embedded Redis starts, before the supervisors and their handlers
// exist: noted, and once Redis answers it is stopped again (black-box helper-180: Ctrl-C in that
// window left it running, silently, until the next start cleaned up).
let stopAsked: NodeJS.Signals | null = null;
const askStop = (signal: NodeJS.Signals) => {
  if (!stopAsked) say(`${signal}: stopping once the embedded Redis has started …`);
  stopAsked ??= signal;
};
const STOP_SIGNALS = ["SIGINT", "SIGTERM", "SIGHUP"] as const;
for (const signal of STOP_SIGNALS) process.on(signal, askStop);

let redis: RedisServerHandle | undefined;
let redisBinary = "";
const env: NodeJS.ProcessEnv = { ...process.env };
if (!config.redisUrl) {
  const running = readEmbeddedState(config.dataDir);
  if (running) {
    fail(
      `another claimwatch is already using ${config.dataDir} (its embedded Redis is pid ${running.pid}); stop it first or set CLAIMWATCH_DATA_DIR`,
    );
  }
  try {
    redisBinary = ensureProgram(REDIS_SERVER, say);
  } catch (error) {
    if (error instanceof ProgramMissingError) fail(error.message);
    throw error;
  }
  try {
    redis = await startRedisServer({
      dir: path.join(config.dataDir, "redis"),
      binary: redisBinary,
      // Its last port when free: `npm run worker`/`web` started beside an earlier start find it.
      preferredPort: lastEmbeddedPort(config.dataDir),
      // Free now, but the web server's, bound only once Redis is up.
      avoidPorts: [config.port],
      onSpawned: (pid) =>
        writeLauncherState(config.dataDir, {
          bootId: currentBootId(),
          launcher: ownedProcess("launcher", process.pid),
          children: [ownedProcess("redis", pid)],
        }),
    });
  } catch (error) {
    fail(`could not start the embedded Redis: ${(error as Error).message}`);
  }
  writeEmbeddedState(config.dataDir, redis!);
  writeLauncherState(config.dataDir, {
    bootId: currentBootId(),
    launcher: ownedProcess("launcher", process.pid),
    children: [ownedProcess("redis", redis!.pid)],
  });
  env.REDIS_URL = redis!.url;
  say(`embedded Redis ${redis!.url} (pid ${redis!.pid}, data in ${path.join(config.dataDir, "redis")})`);
  if (stopAsked) {
    say(`${stopAsked}: stopping embedded Redis …`);
    await redis!.stop(10_000);
    clearEmbeddedState(config.dataDir);
    clearLauncherState(config.dataDir);
    say("stopped");
    process.exit(0);
  }
}
for (const signal of STOP_SIGNALS) process.off(signal, askStop);

// Access: configured tokens, or an operator token generated once into the data dir.
let loginHint: string;
if (config.operatorTokens.length + config.viewerTokens.length > 0) {
  loginHint =
    config.operatorTokens.length === 0
      ? "log in with a token from CLAIMWATCH_VIEWER_TOKEN (no CLAIMWATCH_OPERATOR_TOKEN is set: nobody can force release, trigger, cancel, retry or pause)"
      : "log in with a token from CLAIMWATCH_OPERATOR_TOKEN / CLAIMWATCH_VIEWER_TOKEN";
} else {
  const { token, created } = ensureGeneratedOperatorToken(config.dataDir);
  loginHint = created
    ? `first start: an operator token was generated into ${operatorTokenPath(config.dataDir)}; log in once with:\n    ${browserUrl(config)}/login#token=${token}`
    : `log in with the operator token in ${operatorTokenPath(config.dataDir)}`;
}

let shuttingDown = false;

const supervision = {
  stopping: () => shuttingDown,
  giveUp: (reason: string, exitCode: number) => void shutdown(reason, exitCode),
  record: () => recordLauncherState(),
  say,
  // A worker or web server started again that refuses the definitions file (edited into a bad
  // state while they ran: this launcher's own check refuses it too) waits for the file to load;
  // everything else keeps serving. Any other refusal stops everything, exit 2.
  configCheck: {
    what: config.definitionsPath,
    stamp: () => {
      const stat = fs.statSync(config.definitionsPath);
      return `${stat.ino}:${stat.size}:${stat.mtimeMs}:${stat.ctimeMs}`;
    },
    problem: () => {
      const loaded = loadDefinitions(config.definitionsPath, config.definitionsSource);
      return loaded.ok ? null : loaded.error.message;
    },
  },
};
const worker = new Supervised({
  ...supervision,
  label: "worker",
  first: runningChild(startWorker(root, env, workerNodeArguments)),
  startAgain: async () => runningChild(startWorker(root, env, workerNodeArguments)),
});
const web = new Supervised({
  ...supervision,
  label: "web server",
  first: runningChild(startWeb(root, config, env)),
  startAgain: async () => runningChild(startWeb(root, config, env)),
});
const embedded = redis
  ? new Supervised({
      ...supervision,
      label: "embedded Redis",
      first: runningRedis(redis),
      // The same port and data (AOF): the worker and the web server reconnect to it.
      startAgain: async () => {
        redis = await startRedisServer({
          dir: path.join(config.dataDir, "redis"),
          binary: redisBinary,
          port: redis!.port,
          onSpawned: (pid) => recordLauncherState({ redis: pid }),
        });
        return runningRedis(redis);
      },
      record: () => {
        writeEmbeddedState(config.dataDir, redis!);
        recordLauncherState();
      },
      configExits: false,
    })
  : undefined;

/**
 * The children's pids now, for the next start's cleanup after a launcher that died; `redis`: a
 * Redis spawned but not answering yet (a restart loading its AOF), recorded in its place.
 */
function recordLauncherState(spawned: { redis?: number } = {}): void {
  fs.mkdirSync(config.dataDir, { recursive: true });
  const redisPid = spawned.redis ?? embedded?.current.pid;
  writeLauncherState(config.dataDir, {
    bootId: currentBootId(),
    launcher: ownedProcess("launcher", process.pid),
    children: [
      ownedProcess("worker", worker.current.pid),
      ownedProcess("web", web.current.pid),
      ...(redisPid !== undefined ? [ownedProcess("redis", redisPid)] : []),
    ],
  });
}
recordLauncherState();

async function shutdown(reason: string, exitCode: number): Promise<never> {
  if (!shuttingDown) {
    shuttingDown = true;
    say(`${reason}: stopping worker, web server${redis ? " and embedded Redis" : ""} …`);
    // The worker first: it hands its jobs back and releases claims while Redis is still up. Its
    // own shutdown wait follows the longest killGrace; SIGKILL only after that (its steps die with it).
    await worker.stop(shutdownWaitMs(definitions) + STOP_AFTER_JOBS_MS);
    await web.stop(10_000);
    if (embedded) {
      await embedded.stop(10_000);
      clearEmbeddedState(config.dataDir);
    }
    clearLauncherState(config.dataDir);
    say("stopped");
    process.exit(exitCode);
  }
  return new Promise<never>(() => {});
}

for (const signal of STOP_SIGNALS) process.on(signal, () => void shutdown(signal, 0));

const url = browserUrl(config);

// Through restarts of the web server (one that dies while starting is started again, as later).
if ((await waitForHttp(`${url}/api/health`, () => shuttingDown, 60_000)) && !shuttingDown) {
  say(`claimwatch is running at ${url}  (Ctrl-C to stop)`);
  say(loginHint);
} else if (!shuttingDown) {
  await shutdown(`the web server did not answer at ${url} within 60 s`, 1);
}
