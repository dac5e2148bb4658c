/**
 * A job's cancel request is the first operator's (a real redis-server): a second cancel while the
 * job still runs is audited, but does not rewrite who cancelled it or why, which its run record
 * names.
 */
import assert from "node:assert/strict";
import { after, test } from "node:test";
import { closeRedis, createRedis } from "../../lib/redis/client";
import { redisKeys } from "../../lib/redis/keys";
import { readCancelRequest, writeCancelRequest } from "../../lib/rebuilds/cancel-request";
import { startTestRedis, stopTestRedis, uniquePrefix } from "../support/redis";

const server = await startTestRedis();
const client = createRedis(server.url, "worker", "cancel-first");
after(async () => {
  await closeRedis(client);
  await stopTestRedis(server);
});

test("the first cancel request stays in force; a later one gets it back", async () => {
  const keys = redisKeys(uniquePrefix("cancel"));
  const first = { actor: "alice", reason: "wrong input file", at: 1_000 };
  assert.deepEqual(await writeCancelRequest(client, keys, "job-1", first), first);
  const second = { actor: "bob", reason: "once more", at: 2_000 };
  assert.deepEqual(await writeCancelRequest(client, keys, "job-1", second), first, "the earlier request is returned");
  assert.deepEqual(await readCancelRequest(client, keys, "job-1"), first, "and stays stored");
  assert.ok((await client.pttl(keys.cancelRequest("job-1"))) > 0, "with its TTL");
  // Another job's request is its own.
  assert.deepEqual(await writeCancelRequest(client, keys, "job-2", second), second);
});
