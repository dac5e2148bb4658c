/**
 * A real redis-server per test file, on a free loopback port, in a temporary directory, stopped
 * by PID when the file's tests end. Never port 6379, never a server this run did not start.
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { after } from "node:test";
import { startRedisServer, type RedisServerHandle } from "../../lib/redis/embedded";

export interface TestRedis extends RedisServerHandle {
  dir: string;
}

const started = new Set<TestRedis>();

/** `sentinelConfig`: start a Redis Sentinel with these config lines instead (test/support/sentinel.ts). */
export async function startTestRedis(
  extraArgs: string[] = [],
  options: { sentinelConfig?: string[] } = {},
): Promise<TestRedis> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "claimwatch-redis-"));
  const server = await startRedisServer({ dir, extraArgs, dieWithParent: true, ...options });
  const handle: TestRedis = { ...server, dir };
  started.add(handle);
  return handle;
}

export async function stopTestRedis(server: TestRedis): Promise<void> {
  await server.stop(5_000);
  started.delete(server);
  fs.rmSync(server.dir, { recursive: true, force: true });
}

after(async () => {
  await Promise.all([...started].map((server) => stopTestRedis(server)));
});

let prefixCounter = 0;
/** A key prefix no other test in this process uses. */
export function uniquePrefix(label = "t"): string {
  prefixCounter += 1;
  return `${label}${process.pid}x${prefixCounter}`;
}
