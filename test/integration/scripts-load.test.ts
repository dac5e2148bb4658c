/**
 * Every Lua script compiles on a real Redis, and each header keeps the promised shape. A `]]`
 * inside a `--[[ ]]` header (e.g. `KEYS[ARGV[1]]`) ends the comment early: only a compile shows it.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { Redis } from "ioredis";
import { ALL_SCRIPTS } from "../../lib/redis/scripts";
import { RUN_SCRIPTS } from "../../lib/runs/scripts";
import { WORKER_BEAT } from "../../lib/workers/scripts";
import {
  REQUEST_ID_RENAME,
  SCHEDULE_WANTS_NOTE,
  SCHEDULE_DIGEST_KEEP,
  UNCOUNT_UNSTARTED,
} from "../../lib/rebuilds/scripts";
import { startTestRedis, stopTestRedis, type TestRedis } from "../support/redis";

let server: TestRedis;
let client: Redis;
before(async () => {
  server = await startTestRedis();
  client = new Redis(server.url);
});
after(async () => {
  client.disconnect();
  await stopTestRedis(server);
});

for (const script of [
  ...ALL_SCRIPTS,
  ...RUN_SCRIPTS,
  WORKER_BEAT,
  REQUEST_ID_RENAME,
  UNCOUNT_UNSTARTED,
  SCHEDULE_DIGEST_KEEP,
  SCHEDULE_WANTS_NOTE,
]) {
  test(`${script.command} compiles and documents its KEYS, ARGV and return values`, async () => {
    await client.script("LOAD", script.lua); // rejects with the compile error
    const header = /^\s*--\[\[([\s\S]*?)\]\]/.exec(script.lua)?.[1] ?? "";
    script.keys.forEach((_, i) =>
      assert.match(header, new RegExp(`KEYS\\[${i + 1}\\]`), `KEYS[${i + 1}] in the header`),
    );
    assert.match(header, /ARGV\[1\]/);
    assert.match(header, /Returns/);
  });
}
