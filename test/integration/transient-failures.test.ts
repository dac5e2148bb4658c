/**
 * Issue 14, defect 4: failures that pass are retried, not failed for good. Real errors only: a
 * real EIO from the kernel (reading /proc/self/mem at offset 0), real Redis replies that mean
 * "later" from a real redis-server (OOM under maxmemory, plain and from inside a script).
 */
import assert from "node:assert/strict";
import { after, test } from "node:test";
import { createRedis } from "../../lib/redis/client";
import { isTransient } from "../../lib/rebuilds/classify-failure";
import { TransientStepError } from "../../lib/rebuilds/steps/context";
import { hashInputs } from "../../lib/rebuilds/version";
import { startTestRedis } from "../support/redis";

const server = await startTestRedis();
const client = createRedis(server.url, "worker", "test-transient");
after(() => client.disconnect());

test("an input that fails with EIO is a transient error, not a permanent one", async () => {
  const error = await hashInputs(["/proc/self/mem"]).then(
    () => assert.fail("reading /proc/self/mem at 0 should fail"),
    (e: unknown) => e,
  );
  assert.ok(error instanceof TransientStepError, `got ${String(error)}`);
  assert.match((error as Error).message, /EIO/);
  assert.equal(isTransient(error), true);
});

test("a missing input stays a permanent error that names it", async () => {
  const error = await hashInputs(["/nonexistent/claimwatch-input"]).catch((e: unknown) => e);
  assert.equal(isTransient(error), false);
  assert.match((error as Error).message, /claimwatch-input/);
});

test("Redis OOM (plain and raised inside a script) counts as transient", async () => {
  await client.config("SET", "maxmemory-policy", "noeviction");
  await client.config("SET", "maxmemory", "1");
  try {
    const plain = await client.set("k", "v").catch((e: unknown) => e);
    assert.ok(plain instanceof Error, "the write was refused");
    assert.match((plain as Error).message, /OOM/);
    assert.equal(isTransient(plain), true, (plain as Error).message);
    const scripted = await client.eval("return redis.call('SET', KEYS[1], 'v')", 1, "k2").catch((e: unknown) => e);
    assert.ok(scripted instanceof Error, "the scripted write was refused");
    assert.equal(isTransient(scripted), true, (scripted as Error).message);
  } finally {
    await client.config("SET", "maxmemory", "0");
  }
});

test("Redis replies that are not about availability stay permanent", async () => {
  const wrongType = await client
    .multi()
    .exec()
    .then(() => client.lpush("h", "x"))
    .then(() => client.hget("h", "f"))
    .catch((e: unknown) => e);
  assert.ok(wrongType instanceof Error);
  assert.equal(isTransient(wrongType), false, (wrongType as Error).message);
});
