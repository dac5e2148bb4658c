/**
 * The claims tests' bed: a redis-server of the test file's own (test/support/redis.ts: a free
 * loopback port, never 6379, stopped by PID after the file's tests) and a worker's client of it,
 * disconnected after the file's tests; the claim timing they acquire with, and what a grant is.
 */
import assert from "node:assert/strict";
import { after } from "node:test";
import type { AcquireResult } from "../../lib/claims/index";
import { createRedis } from "../../lib/redis/client";
import { startTestRedis } from "./redis";

export async function startClaimsBed() {
  const server = await startTestRedis();
  const client = createRedis(server.url, "worker");
  after(() => client.disconnect());
  return { server, client, timing: { ttlMs: 10_000, refreshEveryMs: 1_000 } };
}

/** An acquired claim's token; fails the test on any other result. */
export const tokenOf = (result: AcquireResult) =>
  result.status === "acquired" ? result.token : assert.fail("not acquired");

/** An acquired claim's fence and token; fails the test on any other result. */
export const grantOf = (result: AcquireResult) =>
  result.status === "acquired" ? { fence: result.fence, token: result.token } : assert.fail("not acquired");
