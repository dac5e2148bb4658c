/**
 * The Redis servers a process talks to, resolved once from the configuration:
 * - main: the queue, run records, worker heartbeats (`REDIS_URL`, else the embedded Redis);
 * - claims: claims and fences (`CLAIMS_REDIS_URL`, else logical DB 1 of the main server).
 */
import type { Redis } from "ioredis";
import { deriveClaimsRedisUrl, type Config } from "../config";
import { closeRedis, createRedis, type ClientRole } from "./client";
import { lookForEmbeddedRedis } from "./embedded";
import { redisKeys, type RedisKeys } from "./keys";

export class RedisNotConfiguredError extends Error {
  constructor(
    readonly dataDir: string,
    /** Why no embedded Redis was found there (which file was read, what it said). */
    readonly why: string,
  ) {
    super(
      `REDIS_URL is not set and no embedded Redis is running in the data dir ${dataDir}: ${why}. ` +
        "Start everything with `npm start`, set CLAIMWATCH_DATA_DIR to the data dir of the claimwatch that runs, or set REDIS_URL",
    );
    this.name = "RedisNotConfiguredError";
  }
}

export interface RedisUrls {
  main: string;
  claims: string;
  /** Where `main` came from: REDIS_URL, or the embedded Redis recorded in this file. */
  source: { from: "REDIS_URL" } | { from: "embedded"; stateFile: string; pid: number };
  /** Where `claims` came from: CLAIMS_REDIS_URL, or logical DB 1 of the main server. */
  claimsFrom: "CLAIMS_REDIS_URL" | "main";
}

export function resolveRedisUrls(config: Config): RedisUrls {
  if (config.redisUrl) {
    return {
      main: config.redisUrl,
      claims: deriveClaimsRedisUrl(config.redisUrl, config.claimsRedisUrl),
      source: { from: "REDIS_URL" },
      claimsFrom: config.claimsRedisUrl ? "CLAIMS_REDIS_URL" : "main",
    };
  }
  const embedded = lookForEmbeddedRedis(config.dataDir);
  if (!embedded.found) throw new RedisNotConfiguredError(config.dataDir, embedded.why);
  return {
    main: embedded.url,
    claims: deriveClaimsRedisUrl(embedded.url, config.claimsRedisUrl),
    source: { from: "embedded", stateFile: embedded.stateFile, pid: embedded.pid },
    claimsFrom: config.claimsRedisUrl ? "CLAIMS_REDIS_URL" : "main",
  };
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
