/**
 * The web server's long-lived state: configuration, rebuild definitions, Redis clients and the
 * queue, created on first use and kept on `globalThis` so development reloads do not open a new
 * connection per edit. Route handlers and server components reach Redis only through lib/api.
 */
import { Queue } from "bullmq";
import { sessionRevocations, type SessionRevocations } from "../auth/session";
import { getConfig, type Config } from "../config";
import type { HealthProbes } from "../health/health";
import { loadDefinitions, type Definitions } from "../rebuilds/definitions";
import { queuePrefix, REBUILD_QUEUE } from "../rebuilds/queue";
import { closeRedis, createRedis } from "../redis/client";
import { syncProcessClock } from "../redis/clock";
import { openConnections, type Connections } from "../redis/connections";

export interface WebContext {
  config: Config;
  definitions: Definitions;
  connections: Connections;
  probes: HealthProbes;
  /** Logged-out session ids, asked over the probe connection (each check bounded, see session.ts). */
  sessions: SessionRevocations;
  queue: Queue;
  /**
   * This process's clock made the Redis clock (lib/redis/clock.ts: BullMQ's times compared across
   * hosts), measured again every 30 s: settles once it is, or after 2 s without an answer.
   */
  clockReady(): Promise<void>;
}

const holder = globalThis as typeof globalThis & { __claimwatchWeb?: WebContext };

/** Throws `ConfigError`, `DefinitionsError` or `RedisNotConfiguredError`; callers map them. */
export function getWebContext(): WebContext {
  if (holder.__claimwatchWeb) return holder.__claimwatchWeb;
  const config = getConfig();
  const loaded = loadDefinitions(config.definitionsPath, config.definitionsSource);
  if (!loaded.ok) throw loaded.error;
  holder.__claimwatchWeb = openContext(config, loaded.definitions, "claimwatch-web");
  return holder.__claimwatchWeb;
}

/**
 * The clients lib/api works on, for a process that is not the web server (the CLI): connections
 * bounded like a request's. Throws `RedisNotConfiguredError`. `close()` ends every client.
 */
export function openContext(
  config: Config,
  definitions: Definitions,
  name: string,
): WebContext & { close(): Promise<void> } {
  const connections = openConnections(config, "web", name);
  const probeMain = createRedis(connections.urls.main, "probe", `${name}:probe`);
  const probeClaims = createRedis(connections.urls.claims, "probe", `${name}:probe-claims`);
  const probes: HealthProbes = { main: probeMain, claims: probeClaims, keys: connections.keys };
  const sessions = sessionRevocations(probeMain, connections.keys);
  const queue = new Queue(REBUILD_QUEUE, { connection: connections.main, prefix: queuePrefix(connections.keys) });
  queue.on("error", () => {}); // failures surface through the calls that hit them
  const clock = syncProcessClock(probeMain);
  return {
    config,
    definitions,
    connections,
    probes,
    sessions,
    queue,
    clockReady: clock.ready,
    async close() {
      clock.stop();
      await queue.close().catch(() => {});
      await Promise.all([connections.close(), closeRedis(probeMain), closeRedis(probeClaims)]);
    },
  };
}
