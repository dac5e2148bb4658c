/**
 * The web server's long-lived state: configuration and Redis clients, created on first use and
 * kept on `globalThis` so development reloads do not open a new connection per edit.
 * Route handlers and server components reach Redis only through lib/ functions that take these.
 */
import { getConfig, type Config } from "../config";
import { createRedis } from "../redis/client";
import { openConnections, type Connections } from "../redis/connections";
import type { HealthProbes } from "../health/health";

export interface WebContext {
  config: Config;
  connections: Connections;
  probes: HealthProbes;
}

const holder = globalThis as typeof globalThis & { __claimwatchWeb?: WebContext };

/** Throws `ConfigError` or `RedisNotConfiguredError`; callers map them to responses. */
export function getWebContext(): WebContext {
  if (holder.__claimwatchWeb) return holder.__claimwatchWeb;
  const config = getConfig();
  const connections = openConnections(config, "web", "claimwatch-web");
  const probes: HealthProbes = {
    main: createRedis(connections.urls.main, "probe", "claimwatch-web:probe"),
    claims: createRedis(connections.urls.claims, "probe", "claimwatch-web:probe-claims"),
    keys: connections.keys,
  };
  holder.__claimwatchWeb = { config, connections, probes };
  return holder.__claimwatchWeb;
}
