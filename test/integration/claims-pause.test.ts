/**
 * A real child process holding a claim is paused (SIGSTOP) past its TTL; another process
 * acquires; the child is resumed (SIGCONT). It must find its claim lost before it publishes,
 * and its publish must be refused by the fence.
 */
import assert from "node:assert/strict";
import { spawn, type ChildProcessWithoutNullStreams } from "node:child_process";
import path from "node:path";
import readline from "node:readline";
import { after, test } from "node:test";
import { fileURLToPath } from "node:url";
import { acquireClaim, claimName, publishFenced, readPublished, releaseClaim } from "../../lib/claims/index";
import { createRedis } from "../../lib/redis/client";
import { redisKeys } from "../../lib/redis/keys";
import { startTestRedis, uniquePrefix } from "../support/redis";

const server = await startTestRedis();
const client = createRedis(server.url, "worker");
after(() => client.disconnect());

const here = path.dirname(fileURLToPath(import.meta.url));
const holderScript = path.resolve(here, "../support/claim-holder.ts");
const repoRoot = path.resolve(here, "../..");

/** Lines of a child's stdout, awaitable by prefix. */
function lineReader(child: ChildProcessWithoutNullStreams) {
  const seen: string[] = [];
  const waiters: Array<{ prefix: string; resolve: (line: string) => void }> = [];
  readline.createInterface({ input: child.stdout }).on("line", (line) => {
    seen.push(line);
    for (const waiter of waiters.filter((w) => line.startsWith(w.prefix))) {
      waiters.splice(waiters.indexOf(waiter), 1);
      waiter.resolve(line);
    }
  });
  return {
    seen,
    next(prefix: string, timeoutMs: number): Promise<string> {
      const already = seen.find((line) => line.startsWith(prefix));
      if (already) return Promise.resolve(already);
      return new Promise((resolve, reject) => {
        const timer = setTimeout(
          () => reject(new Error(`no "${prefix}" line within ${timeoutMs} ms; saw ${JSON.stringify(seen)}`)),
          timeoutMs,
        );
        waiters.push({ prefix, resolve: (line) => (clearTimeout(timer), resolve(line)) });
      });
    },
  };
}

test("a holder paused past its TTL is aborted before it can publish, and its publish is refused", async () => {
  const prefix = uniquePrefix("pause");
  const keys = redisKeys(prefix);
  const name = claimName("builds/paused");
  const ttlMs = 1_000;
  const child = spawn(process.execPath, ["--import", "tsx", holderScript], {
    cwd: repoRoot,
    env: {
      ...process.env,
      REDIS_URL: server.url,
      KEY_PREFIX: prefix,
      CLAIM_NAME: name,
      TTL_MS: String(ttlMs),
      REFRESH_EVERY_MS: "300",
      JOB_ID: "job-paused",
    },
    stdio: ["pipe", "pipe", "pipe"],
  });
  let stderr = "";
  child.stderr.on("data", (chunk) => (stderr += chunk));
  const exited = new Promise((resolve) => child.once("exit", resolve));
  const lines = lineReader(child);
  try {
    const acquired = await lines.next("acquired", 20_000).catch((error) => {
      throw new Error(`${(error as Error).message}; stderr: ${stderr}`);
    });
    const [, holderToken, holderFence] = acquired.split(" ");
    assert.equal(await client.get(keys.claim(name)), holderToken);

    process.kill(child.pid!, "SIGSTOP");
    const pausedAt = Date.now();
    while ((await client.exists(keys.claim(name))) === 1) {
      assert.ok(Date.now() - pausedAt < ttlMs * 5, "the paused holder's claim never expired");
      await new Promise((r) => setTimeout(r, 25));
    }
    const ours = await acquireClaim(
      client,
      keys,
      name,
      { jobId: "job-other" },
      { ttlMs: 10_000, refreshEveryMs: 1_000 },
    );
    assert.equal(ours.status, "acquired");
    if (ours.status !== "acquired") return;
    assert.ok(ours.fence > Number(holderFence));
    assert.equal(
      (await publishFenced(client, keys, { name, fence: ours.fence, token: ours.token, value: "from-test" })).status,
      "published",
    );

    // The command is waiting in the pipe when the holder resumes: its I/O may run before its timers.
    child.stdin.write("publish\n");
    process.kill(child.pid!, "SIGCONT");

    const lost = await lines.next("lost", 10_000);
    assert.equal(lost, "lost deadline aborted=true");
    assert.equal(await lines.next("publish", 10_000), "publish superseded");
    assert.equal(await lines.next("error", 10_000), "error ClaimLostError deadline");
    assert.ok(lines.seen.indexOf(lost) < lines.seen.indexOf("publish superseded"), "lost before publishing");

    const published = await readPublished(client, keys, name);
    assert.equal(published?.value, "from-test");
    assert.equal(published?.fence, ours.fence);
    assert.equal(await client.get(keys.claim(name)), ours.token, "the resumed holder's release left our claim alone");
    assert.deepEqual(await releaseClaim(client, keys, name, ours.token), { status: "released" });
    await exited;
    assert.equal(child.exitCode, 0, stderr);
  } finally {
    if (child.exitCode === null && child.signalCode === null) {
      process.kill(child.pid!, "SIGCONT");
      process.kill(child.pid!, "SIGKILL");
      await exited;
    }
  }
});
