import assert from "node:assert/strict";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import { Redis } from "ioredis";
import { freePort, startRedisServer } from "../../lib/redis/embedded";

test("embedded redis keeps its data across a restart (AOF) and runs with noeviction", async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "claimwatch-embedded-"));
  try {
    const first = await startRedisServer({ dir });
    const client = new Redis(first.url);
    assert.equal(await client.config("GET", "maxmemory-policy").then((r) => (r as string[])[1]), "noeviction");
    assert.equal(await client.config("GET", "appendonly").then((r) => (r as string[])[1]), "yes");
    assert.equal(await client.config("GET", "bind").then((r) => (r as string[])[1]), "127.0.0.1");
    await client.set("survives", "yes");
    await client.quit();
    await first.stop();
    assert.throws(() => process.kill(first.pid, 0), { code: "ESRCH" });

    const second = await startRedisServer({ dir });
    const again = new Redis(second.url);
    assert.equal(await again.get("survives"), "yes");
    await again.quit();
    await second.stop();
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test("a port that is taken fails with the reason instead of hanging", async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "claimwatch-embedded-"));
  const holder = await startRedisServer({ dir: path.join(dir, "a") });
  try {
    await assert.rejects(startRedisServer({ dir: path.join(dir, "b"), port: holder.port }), /did not start/);
  } finally {
    await holder.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test("a port to avoid (the web server's, bound only after Redis) is never picked, not even as the preferred one", async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "claimwatch-embedded-"));
  try {
    const web = await freePort();
    const redis = await startRedisServer({ dir, preferredPort: web, avoidPorts: [web] });
    try {
      assert.notEqual(redis.port, web);
    } finally {
      await redis.stop();
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
