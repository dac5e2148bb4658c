/**
 * What the dashboard says while a Redis is down (a real redis-server, stopped): the API's error is
 * a 503 `unavailable` (GET /metrics and the login were 500s: ioredis's "max retries per request"
 * error was not taken for an outage), and the health report's reason is the connection's own
 * error, never ioredis's words about its options.
 */
import assert from "node:assert/strict";
import { after, test } from "node:test";
import { errorResponse, fromRedis } from "../../lib/api/errors";
import { inspectRedis } from "../../lib/health/redis-safety";
import { closeRedis, createRedis, describeRedisFailure } from "../../lib/redis/client";
import { startTestRedis, stopTestRedis } from "../support/redis";

const server = await startTestRedis();
after(() => stopTestRedis(server));

test("a command refused for want of a connection is a 503 unavailable, described by the connection's error", async () => {
  const clients = (["web", "claims", "probe"] as const).map((role) => ({
    role,
    client: createRedis(server.url, role, `down-${role}`),
  }));
  try {
    for (const { client } of clients) await client.ping();
    await server.stop(5_000);
    for (const { role, client } of clients) {
      let caught: unknown;
      for (let i = 0; i < 50 && !caught; i++) {
        try {
          await client.get("anything");
          await new Promise((r) => setTimeout(r, 100));
        } catch (error) {
          caught = error;
        }
      }
      assert.ok(caught, `${role}: a command fails while the server is down`);
      const response = errorResponse(caught);
      assert.equal(response.status, 503, `${role}: ${String(caught)}`);
      assert.deepEqual(await response.json(), {
        error: { code: "unavailable", message: "Redis is unreachable; see /api/health" },
      });
      // Read from one server only (the claims API): the 503 names which (helper-151).
      const named = await fromRedis("the claims Redis", Promise.reject(caught)).catch((error: unknown) => error);
      assert.deepEqual(await errorResponse(named).json(), {
        error: { code: "unavailable", message: "The claims Redis is unreachable; see /api/health" },
      });
      const described = describeRedisFailure(client, caught);
      assert.doesNotMatch(described, /maxRetriesPerRequest|max retries per request/i, `${role}: ${described}`);
      assert.match(described, /ECONNREFUSED|no connection|Connection is closed|timed out/, `${role}: ${described}`);
    }
  } finally {
    for (const { client } of clients) await closeRedis(client);
  }
});

test("a Sentinel URL that cannot connect (no such master name) is described by the sentinels' own answer, not 'Command timed out'", async () => {
  const data = await startTestRedis();
  const sentinel = await startTestRedis([], {
    sentinelConfig: [`sentinel monitor cw 127.0.0.1 ${data.port} 1`],
  });
  const client = createRedis(`redis+sentinel://127.0.0.1:${sentinel.port}/nosuchmaster`, "probe", "sentinel-typo");
  try {
    const inspected = await inspectRedis(client);
    assert.equal(inspected.ok, false);
    const error = inspected.ok ? "" : inspected.error;
    assert.ok(!/^Command timed out$/.test(error), error);
    assert.match(error, /No such master with that name|sentinels/i, error);
  } finally {
    client.disconnect();
    await stopTestRedis(sentinel);
    await stopTestRedis(data);
  }
});
