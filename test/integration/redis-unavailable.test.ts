/**
 * One rule for "Redis is away or refusing writes for now" (lib/redis/unavailable): a primary with
 * too few replicas answers NOREPLICAS, and inside a transaction (MULTI) ioredis reports it as
 * EXECABORT with the NOREPLICAS in `previousErrors` — the API answered 500 "internal" and the CLI
 * "failed" for it, not 503 `unavailable` / exit 3 (black-box helper-121). A real redis-server
 * with `min-replicas-to-write 1` and no replica.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import type { Redis } from "ioredis";
import { publicErrorOf } from "../../lib/api/errors";
import { isTransient } from "../../lib/rebuilds/classify-failure";
import { closeRedis, createRedis } from "../../lib/redis/client";
import { isRedisUnavailable } from "../../lib/redis/unavailable";
import { isRedisUnavailable as cliRedisUnavailable } from "../../cli/session";
import { startTestRedis, stopTestRedis, type TestRedis } from "../support/redis";

let server: TestRedis;
let client: Redis;
before(async () => {
  server = await startTestRedis(["--min-replicas-to-write", "1"]);
  client = createRedis(`redis://127.0.0.1:${server.port}`, "worker");
});
after(async () => {
  await closeRedis(client);
  await stopTestRedis(server);
});

test("NOREPLICAS, alone or inside a discarded transaction: unavailable (503, exit 3) and transient", async () => {
  const alone = await client.set("k", "v").then(
    () => null,
    (error: unknown) => error,
  );
  const inTransaction = await client
    .multi()
    .set("k", "v")
    .incr("n")
    .exec()
    .then(
      () => null,
      (error: unknown) => error,
    );
  for (const [what, error] of [
    ["alone", alone],
    ["in a transaction", inTransaction],
  ] as const) {
    assert.ok(error instanceof Error, `${what}: refused`);
    assert.equal(isRedisUnavailable(error), true, `${what}: ${(error as Error).message}`);
    assert.equal(cliRedisUnavailable(error), true, what);
    assert.equal(isTransient(error), true, what);
    const answer = publicErrorOf(error);
    assert.deepEqual({ ...answer, message: "" }, { status: 503, code: "unavailable", message: "" });
    // Redis answered: the operator is told what it said, not that it is unreachable.
    assert.match(
      answer.message,
      /^Redis refuses this for now: NOREPLICAS Not enough good replicas to write\.; see \/api\/health$/,
    );
  }
  assert.match((inTransaction as Error).message, /^EXECABORT/);
  // A transaction discarded for NOREPLICAS and a real error at once is that error: sending it
  // again later would fail the same way.
  const mixed = await client
    .multi()
    .set("k", "v")
    .call("SET", "only-a-key")
    .exec()
    .then(
      () => null,
      (error: unknown) => error,
    );
  assert.ok(mixed instanceof Error);
  const replies = ((mixed as { previousErrors?: Error[] }).previousErrors ?? []).map((e) => e.message.split(" ")[0]);
  assert.deepEqual(replies, ["NOREPLICAS", "ERR"]);
  assert.equal(isRedisUnavailable(mixed), false);
  assert.equal(isTransient(mixed), false);
  assert.equal(publicErrorOf(mixed).status, 500);
  // Any other error is not.
  const other = new Error("ERR wrong number of arguments");
  assert.equal(isRedisUnavailable(other), false);
});

test("memory full under noeviction (OOM): unavailable (503 naming the reply, exit 3) and transient, as the worker takes it", async (t) => {
  const full = await startTestRedis(["--maxmemory", "2mb", "--maxmemory-policy", "noeviction"]);
  const redis = createRedis(`redis://127.0.0.1:${full.port}`, "worker");
  t.after(async () => {
    await closeRedis(redis);
    await stopTestRedis(full);
  });
  let refused: unknown = null;
  for (let i = 0; i < 200 && !refused; i++) {
    refused = await redis.set(`fill:${i}`, "x".repeat(100_000)).then(
      () => null,
      (error: unknown) => error,
    );
  }
  assert.ok(refused instanceof Error, "the server refused a write once full");
  assert.match(refused.message, /^OOM /);
  assert.equal(isRedisUnavailable(refused), true);
  assert.equal(cliRedisUnavailable(refused), true);
  assert.equal(isTransient(refused), true);
  const answer = publicErrorOf(refused);
  assert.equal(answer.status, 503);
  assert.equal(answer.code, "unavailable");
  assert.match(answer.message, /^Redis refuses this for now: OOM command not allowed when used memory > 'maxmemory'/);
});
