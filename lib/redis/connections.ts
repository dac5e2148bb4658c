/**
 * The Redis servers a process talks to, resolved once from the configuration:
 * - main: the queue, run records, worker heartbeats (`REDIS_URL`, else the embedded Redis);
 * - claims: claims and fences (`CLAIMS_REDIS_URL`, else logical DB 1 of the main server).
 */
import type { Redis } from "ioredis";
import { deriveClaimsRedisUrl, type Config } from "../config";
import { closeRedis, createRedis, type ClientRole } from "./client";
import { readEmbeddedState } from "./embedded";
import { redisKeys, type RedisKeys } from "./keys";

export class RedisNotConfiguredError extends Error {
  constructor() {
    super("REDIS_URL is not set and no embedded Redis is running: start everything with `npm start`, or set REDIS_URL");
    this.name = "RedisNotConfiguredError";
  }
}

export interface RedisUrls {
  main: string;
  claims: string;
}

export function resolveRedisUrls(config: Config): RedisUrls {
  const main = config.redisUrl ?? readEmbeddedState(config.dataDir)?.url;
  if (!main) throw new RedisNotConfiguredError();
  return { main, claims: deriveClaimsRedisUrl(main, config.claimsRedisUrl) };
}

export interface Connections {
  urls: RedisUrls;
  keys: RedisKeys;
  main: Redis;
  claims: Redis;
  close(): Promise<void>;
}

export function openConnections(config: Config, role: ClientRole, name: string): Connections {
  const urls = resolveRedisUrls(config);
  const main = createRedis(urls.main, role, `${name}:main`);
  const claims = createRedis(urls.claims, role, `${name}:claims`);
  return {
    urls,
    keys: redisKeys(config.keyPrefix),
    main,
    claims,
    async close() {
      await Promise.all([closeRedis(main), closeRedis(claims)]);
    },
  };
}
