/** Direct access to the e2e stack's Redis, to make changes the way the worker does (for live tests). */
import fs from "node:fs";
import path from "node:path";
import { test } from "@playwright/test";
import type { Redis } from "ioredis";
import { withClaim } from "../../lib/claims";
import { deriveClaimsRedisUrl } from "../../lib/config";
import { closeRedis, createRedis } from "../../lib/redis/client";
import { redisKeys } from "../../lib/redis/keys";
import { stack } from "./stack";

export interface StackRedis {
  main: Redis;
  claims: Redis;
  keys: ReturnType<typeof redisKeys>;
  close(): Promise<void>;
}

export function stackRedis(dataDir: string): StackRedis {
  const { url } = JSON.parse(fs.readFileSync(path.join(dataDir, "embedded-redis.json"), "utf8")) as { url: string };
  const main = createRedis(url, "worker", "claimwatch-e2e");
  const claims = createRedis(deriveClaimsRedisUrl(url, undefined), "worker", "claimwatch-e2e:claims");
  return {
    main,
    claims,
    keys: redisKeys("claimwatch"),
    close: async () => {
      await Promise.all([closeRedis(main), closeRedis(claims)]);
    },
  };
}

/** The stack's Redis for one spec file: connected before its tests, closed after them. */
export function stackRedisForSpec(): StackRedis {
  const redis = {} as StackRedis;
  test.beforeAll(() => {
    Object.assign(redis, stackRedis(stack().dataDir));
  });
  test.afterAll(async () => {
    await redis.close();
  });
  return redis;
}

/**
 * Holds a claim through the worker's own code path (`withClaim`, which publishes its events)
 * until `release()` is called; resolves `acquired` once it is held.
 */
export function holdClaim(redis: StackRedis, name: string, rebuild: string) {
  let release!: () => void;
  const released = new Promise<void>((resolve) => (release = resolve));
  let acquired!: () => void;
  const held = new Promise<void>((resolve) => (acquired = resolve));
  const done = withClaim(
    redis.claims,
    redis.keys,
    name,
    { rebuild, version: "e2e", workerId: "e2e-holder", jobId: `job-${rebuild}` },
    async () => {
      acquired();
      await released;
    },
    { ttlMs: 60_000, refreshEveryMs: 10_000 },
  );
  return { held, release: async () => (release(), await done) };
}
