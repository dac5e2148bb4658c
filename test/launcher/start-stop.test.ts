/**
 * `npm start` as a user runs it (needs a build): embedded Redis, web, worker; SIGINT/SIGTERM stop
 * all of them with exit 0 and nothing left behind; a second start finds the data again.
 */
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import fs from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { after, test } from "node:test";
import { Redis } from "ioredis";
import { clearLauncherState, readLauncherState } from "../../lib/launcher/state";
import { freePort, readEmbeddedState } from "../../lib/redis/embedded";
import { descendantPids, isRunning, waitForLine, waitUntilGone } from "../support/processes";

async function waitUntil(condition: () => boolean, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error("condition not met in time");
    await new Promise((r) => setTimeout(r, 50));
  }
}

const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "claimwatch-launcher-"));
after(() => fs.rmSync(dataDir, { recursive: true, force: true }));

/** `npm start` on the shared data dir and a free port, with its embedded Redis (REDIS_URL unset). */
async function spawnLauncher(extraEnv: Record<string, string> = {}) {
  const port = await freePort();
  const env: NodeJS.ProcessEnv = { ...process.env, PORT: String(port), CLAIMWATCH_DATA_DIR: dataDir, ...extraEnv };
  delete env.REDIS_URL;
  const launcher = spawn(process.execPath, ["--import", "tsx", "scripts/start.ts"], {
    env,
    stdio: ["ignore", "pipe", "pipe"],
  });
  return { port, launcher };
}

async function runOnce(
  signal: NodeJS.Signals,
  body: (url: string, redisUrl: string, output: () => string) => Promise<void>,
  extraEnv: Record<string, string> = {},
) {
  const { port, launcher } = await spawnLauncher(extraEnv);
  const exited = new Promise<number | null>((resolve) => launcher.once("exit", (code) => resolve(code)));
  let printed = "";
  launcher.stdout.on("data", (chunk: Buffer) => (printed += chunk.toString()));
  let children: number[] | undefined;
  try {
    const line = await waitForLine(launcher, /claimwatch is running at/, 120_000);
    assert.ok(line.includes(`http://127.0.0.1:${port}`), line);
    const state = readEmbeddedState(dataDir);
    assert.ok(state, "the launcher records its embedded Redis");
    children = descendantPids(launcher.pid!);
    assert.ok(children.includes(state.pid), "the embedded Redis is the launcher's child");
    await body(`http://127.0.0.1:${port}`, state.url, () => printed);
  } finally {
    // With what the launcher started again after a kill (the body's), if any.
    children = [...new Set([...(children ?? []), ...descendantPids(launcher.pid!)])];
    launcher.kill(signal);
  }
  assert.equal(await exited, 0, `npm start exits 0 on ${signal}`);
  assert.deepEqual(await waitUntilGone(children, 5_000), [], "no redis-server, next-server or worker left");
  assert.equal(readEmbeddedState(dataDir), undefined, "the embedded Redis record is cleared");
}

test("npm start serves a healthy dashboard, stops cleanly on SIGTERM, and finds its data again after SIGINT restart", async () => {
  let firstRedisUrl = "";
  await runOnce("SIGTERM", async (url, redisUrl, output) => {
    firstRedisUrl = redisUrl;
    // First start: an operator token is generated (0600) and a login link printed once.
    const tokenFile = path.join(dataDir, "operator-token");
    assert.equal(fs.statSync(tokenFile).mode & 0o777, 0o600);
    const token = fs.readFileSync(tokenFile, "utf8").trim();
    await waitUntil(() => output().includes("/login#token="));
    assert.ok(output().includes(`/login#token=${token}`), output());
    const anonymous = await fetch(`${url}/claims`, { redirect: "manual" });
    assert.equal(anonymous.status, 307, "pages need a login");
    assert.match(anonymous.headers.get("location") ?? "", /\/login$/);
    const withToken = await fetch(`${url}/api/claims`, { headers: { authorization: `Bearer ${token}` } });
    assert.equal(withToken.status, 200);
    let health: { ok: boolean; workers: number | null; redis: Record<string, unknown> } | undefined;
    for (let i = 0; i < 100 && !(health && (health.workers ?? 0) > 0); i++) {
      health = (await (
        await fetch(`${url}/api/health`, { headers: { authorization: `Bearer ${token}` } })
      ).json()) as typeof health;
      if ((health?.workers ?? 0) === 0) await new Promise((r) => setTimeout(r, 200));
    }
    assert.equal(health?.ok, true);
    assert.equal(health?.workers, 1, "one worker process with a live heartbeat");
    assert.equal(health?.redis.evictionPolicy, "noeviction");
    assert.equal(health?.redis.persistence, "aof");
    // Anonymous (a load balancer): the verdict, not the server's version or settings.
    const anonymousHealth = (await (await fetch(`${url}/api/health`)).json()) as typeof health;
    assert.deepEqual(anonymousHealth?.redis, { ok: true });
    assert.equal(anonymousHealth?.workers, 1);
    const page = await fetch(`${url}/login`);
    assert.equal(page.status, 200);
    const client = new Redis(redisUrl);
    await client.set("launcher-test:survives", "yes");
    await client.quit();
  });

  await runOnce("SIGINT", async (_url, redisUrl, output) => {
    // The same port again (it is free): a worker or dashboard started beside the first start
    // with `npm run worker`/`web` reconnects to it.
    assert.equal(redisUrl, firstRedisUrl, "the embedded Redis is on its last port again");
    await waitUntil(() => output().includes("log in with the operator token in"));
    assert.ok(!output().includes("#token="), "the login link is printed only once");
    const client = new Redis(redisUrl);
    assert.equal(await client.get("launcher-test:survives"), "yes", "data written before the restart is still there");
    await client.quit();
  });
});

test("npm start run through npm itself: SIGTERM to npm stops the launcher and everything it started, exit 0", async () => {
  // npm runs the script through `sh -c`; a shell that does not pass the signal on (dash) used to
  // die alone and leave the launcher, Redis, worker and web server running (helper-130).
  const port = await freePort();
  const env: NodeJS.ProcessEnv = { ...process.env, PORT: String(port), CLAIMWATCH_DATA_DIR: dataDir };
  delete env.REDIS_URL;
  const npm = spawn(path.join(path.dirname(process.execPath), "npm"), ["start", "--silent"], {
    env,
    stdio: ["ignore", "pipe", "pipe"],
  });
  const exited = new Promise<[number | null, NodeJS.Signals | null]>((resolve) =>
    npm.once("exit", (code, signal) => resolve([code, signal])),
  );
  let everything: number[] = [];
  try {
    await waitForLine(npm, /claimwatch is running at/, 120_000);
    everything = descendantPids(npm.pid!);
    assert.ok(everything.length >= 4, `the launcher and its children run under npm (${everything.length})`);
  } finally {
    everything = [...new Set([...everything, ...descendantPids(npm.pid!)])];
    npm.kill("SIGTERM");
  }
  const exit = await exited;
  const left = await waitUntilGone(everything, 10_000);
  for (const pid of left) process.kill(pid, "SIGKILL");
  assert.deepEqual(left, [], "no launcher, redis-server, next-server or worker left");
  assert.deepEqual(exit, [0, null], "npm exits 0 on SIGTERM");
});

/** The pid the launcher recorded for its child `name` (it rewrites the record after each restart). */
const childPid = (name: string) => readLauncherState(dataDir)?.children.find((c) => c.name === name)?.pid;

async function healthOf(url: string): Promise<{ status: number; workers: number | null }> {
  try {
    const response = await fetch(`${url}/api/health`, { signal: AbortSignal.timeout(5_000) });
    return { status: response.status, workers: ((await response.json()) as { workers: number | null }).workers };
  } catch {
    return { status: 0, workers: null };
  }
}

test("npm start starts a killed worker, web server and embedded Redis again; the dashboard and the data survive", async () => {
  await runOnce("SIGTERM", async (url, redisUrl, output) => {
    const said = (pattern: RegExp) => waitUntil(() => pattern.test(output()), 60_000);

    // The worker (kill -9, as the OOM killer does): a new one, which beats.
    const worker = childPid("worker")!;
    process.kill(worker, "SIGKILL");
    await said(
      new RegExp(`the worker \\(pid ${worker}\\) was killed by SIGKILL; starting it again in 1 s \\(restart 1\\)`),
    );
    await said(/the worker was started again \(pid \d+\)/);
    const newWorker = childPid("worker")!;
    assert.notEqual(newWorker, worker, "the launcher's record names the new worker");
    assert.ok(isRunning(newWorker));
    for (let i = 0; i < 150 && (await healthOf(url)).workers !== 1; i++) await new Promise((r) => setTimeout(r, 200));

    // The embedded Redis: the same port and data.
    const client = new Redis(redisUrl, { maxRetriesPerRequest: null });
    client.on("error", () => {}); // refused while the Redis is down: the commands wait
    try {
      await client.set("launcher-test:restart", "kept");
      await new Promise((r) => setTimeout(r, 1_500)); // past the AOF's fsync of every second
      const redis = childPid("redis")!;
      process.kill(redis, "SIGKILL");
      await said(new RegExp(`the embedded Redis \\(pid ${redis}\\) was killed by SIGKILL; starting it again in 1 s`));
      await said(/the embedded Redis was started again \(pid \d+\)/);
      assert.equal(readEmbeddedState(dataDir)?.pid, childPid("redis"), "the embedded Redis record names the new one");
      assert.equal(readEmbeddedState(dataDir)?.url, redisUrl, "on the same port");
      assert.equal(await client.get("launcher-test:restart"), "kept", "with the data written before the kill");
    } finally {
      client.disconnect();
    }

    // The web server.
    const web = childPid("web")!;
    process.kill(web, "SIGKILL");
    await said(new RegExp(`the web server \\(pid ${web}\\) was killed by SIGKILL; starting it again in 1 s`));
    await said(/the web server was started again \(pid \d+\)/);

    // Everything answers again: the dashboard, both Redis connections, a live worker.
    let health = await healthOf(url);
    for (let i = 0; i < 300 && !(health.status === 200 && health.workers === 1); i++) {
      await new Promise((r) => setTimeout(r, 200));
      health = await healthOf(url);
    }
    assert.deepEqual(health, { status: 200, workers: 1 }, output());
    assert.doesNotMatch(output(), /stopping worker/, "nothing was stopped");
  });
});

test("a worker started again that refuses its definitions file (edited into a bad state while it ran): the dashboard stays up, and the worker starts again once the file is fixed", async () => {
  const configDir = fs.mkdtempSync(path.join(os.tmpdir(), "claimwatch-launcher-config-"));
  const file = path.join(configDir, "claimwatch.yaml");
  const good = fs.readFileSync("claimwatch.yaml", "utf8");
  fs.writeFileSync(file, good);
  try {
    await runOnce(
      "SIGTERM",
      async (url, _redisUrl, output) => {
        const said = (pattern: RegExp) => waitUntil(() => pattern.test(output()), 60_000);
        // A typo saved while everything runs (nothing reads it yet), then the worker dies (kill -9).
        fs.writeFileSync(file, good.replace(/^rebuilds:/m, "rebuildz:"));
        const worker = childPid("worker")!;
        process.kill(worker, "SIGKILL");
        await said(
          /the worker refused its configuration \(above\): claimwatch\.yaml:\d+: .*rebuildz.*; everything else keeps running: fix .*claimwatch\.yaml, and the worker is started again once it loads/,
        );
        // The dashboard answers, and says no worker is live.
        let health = await healthOf(url);
        for (let i = 0; i < 150 && !(health.status === 200 && health.workers === 0); i++) {
          await new Promise((r) => setTimeout(r, 200));
          health = await healthOf(url);
        }
        assert.deepEqual(health, { status: 200, workers: 0 }, output());
        // Fixed: the worker starts again and beats.
        fs.writeFileSync(file, good);
        await said(/claimwatch\.yaml loads now: starting the worker again/);
        await said(/the worker was started again \(pid \d+\)/);
        for (let i = 0; i < 300 && !(health.status === 200 && health.workers === 1); i++) {
          await new Promise((r) => setTimeout(r, 200));
          health = await healthOf(url);
        }
        assert.deepEqual(health, { status: 200, workers: 1 }, output());
        assert.doesNotMatch(output(), /stopping worker/, "nothing was stopped");
      },
      { CLAIMWATCH_CONFIG: file },
    );
  } finally {
    fs.rmSync(configDir, { recursive: true, force: true });
  }
});

test("npm start stops everything when a child keeps exiting (a crash loop), exit 1", async () => {
  const { launcher } = await spawnLauncher();
  const exited = new Promise<number | null>((resolve) => launcher.once("exit", (code) => resolve(code)));
  let printed = "";
  launcher.stdout.on("data", (chunk: Buffer) => (printed += chunk.toString()));
  const seen = new Set<number>();
  let others: number[] | undefined;
  try {
    await waitForLine(launcher, /claimwatch is running at/, 120_000);
    others = descendantPids(launcher.pid!);
    // Kill each worker it starts, as a worker that crashes at once would end.
    while (launcher.exitCode === null && seen.size < 5) {
      const pid = childPid("worker");
      if (pid && !seen.has(pid) && isRunning(pid)) {
        seen.add(pid);
        process.kill(pid, "SIGKILL");
      }
      await new Promise((r) => setTimeout(r, 100));
    }
    assert.equal(await exited, 1, printed);
  } finally {
    if (launcher.exitCode === null) launcher.kill("SIGTERM");
  }
  assert.match(
    printed,
    /the worker \(pid \d+\) was killed by SIGKILL; it ended 5 times within 120 s: stopping worker, web server and embedded Redis/,
  );
  assert.match(printed, /starting it again in 8 s \(restart 4\)/);
  assert.equal(readEmbeddedState(dataDir), undefined, "the embedded Redis record is cleared");
  assert.equal(readLauncherState(dataDir), undefined, "the launcher's record is cleared");
  assert.deepEqual(await waitUntilGone([...(others ?? []), ...seen], 5_000), [], "nothing it started is left");
});

test("a second npm start on the same data dir is refused while the first runs", async () => {
  await runOnce("SIGTERM", async () => {
    const { launcher: second } = await spawnLauncher();
    const line = await waitForLine(second, /already using/, 60_000);
    assert.match(line, /another claimwatch is already using/);
    const code = await new Promise<number | null>((resolve) =>
      second.exitCode !== null ? resolve(second.exitCode) : second.once("exit", (c) => resolve(c)),
    );
    assert.equal(code, 1);
  });
});

test("npm start after a launcher was SIGKILLed stops exactly what that launcher left running, then starts", async () => {
  const { launcher: first } = await spawnLauncher();
  const firstExited = new Promise((resolve) => first.once("exit", resolve));
  await waitForLine(first, /claimwatch is running at/, 120_000);
  const left = descendantPids(first.pid!);
  assert.ok(left.length >= 3, `worker, web and Redis run under the launcher: ${left}`);
  first.kill("SIGKILL");
  await firstExited;
  await new Promise((r) => setTimeout(r, 500));
  assert.ok(left.every(isRunning), "a SIGKILLed launcher cannot stop its children: they run on");

  await runOnce("SIGTERM", async (url, _redisUrl, output) => {
    assert.match(
      output(),
      /stopped what a launcher that died \(pid \d+\) left running: worker \(pid \d+\), web \(pid \d+\), redis \(pid \d+\)/,
    );
    assert.deepEqual(await waitUntilGone(left, 1_000), [], "every process the dead launcher left is gone");
    assert.equal((await fetch(`${url}/api/health`)).status, 200, "and the new start serves");
  });
});

test("Ctrl-C while the embedded Redis starts (before the supervisors run): it is stopped again, exit 0, nothing left behind (black-box helper-180)", async () => {
  const { launcher } = await spawnLauncher();
  const exited = new Promise<number | null>((resolve) => launcher.once("exit", (code) => resolve(code)));
  let printed = "";
  launcher.stdout.on("data", (chunk: Buffer) => (printed += chunk.toString()));
  // The moment its Redis is spawned (recorded for a later start's cleanup), before it answers.
  let redisPid: number | undefined;
  const deadline = Date.now() + 120_000;
  while (redisPid === undefined && Date.now() < deadline) {
    redisPid = readLauncherState(dataDir)?.children.find((child) => child.name === "redis")?.pid;
    if (redisPid === undefined) await new Promise((r) => setTimeout(r, 2));
  }
  assert.ok(redisPid !== undefined, "the launcher spawned its Redis");
  launcher.kill("SIGINT");
  try {
    assert.equal(await exited, 0, `exit 0 on a Ctrl-C while Redis starts; it printed:\n${printed}`);
    assert.deepEqual(await waitUntilGone([redisPid], 5_000), [], "the embedded Redis is stopped, not left running");
    assert.equal(readEmbeddedState(dataDir), undefined, "the embedded Redis record is cleared");
    assert.equal(readLauncherState(dataDir), undefined, "the launcher's record is cleared");
  } finally {
    // What a failing launcher left (its Redis, by pid), so the next test starts clean.
    if (isRunning(redisPid)) process.kill(redisPid, "SIGKILL");
    clearLauncherState(dataDir);
  }
});

test("npm start refuses a PORT in use and a HOST that is not this machine's before it starts anything: one line naming the variable", async () => {
  const busy = net.createServer();
  await new Promise<void>((resolve) => busy.listen(0, "127.0.0.1", () => resolve()));
  const busyPort = (busy.address() as net.AddressInfo).port;
  const token = "alice:aaaaaaaaaaaaaaaaaaaa";
  const cases = [
    { env: { PORT: String(busyPort) }, code: 1, line: new RegExp(`^claimwatch: PORT: ${busyPort} is already in use`) },
    {
      env: { HOST: "192.0.2.1", CLAIMWATCH_OPERATOR_TOKEN: token },
      code: 2,
      line: /^claimwatch: configuration error: HOST: 192\.0\.2\.1 is not an address of this machine/,
    },
    {
      env: { HOST: "not..a..host", CLAIMWATCH_OPERATOR_TOKEN: token },
      code: 2,
      line: /^claimwatch: configuration error: HOST: must be a host name or IP address/,
    },
  ];
  try {
    for (const { env: extra, code, line } of cases) {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "claimwatch-launcher-refused-"));
      try {
        const env: NodeJS.ProcessEnv = {
          ...process.env,
          PORT: String(await freePort()),
          CLAIMWATCH_DATA_DIR: dir,
          ...extra,
        };
        delete env.REDIS_URL;
        const result = spawnSync(process.execPath, ["--import", "tsx", "scripts/start.ts"], {
          env,
          encoding: "utf8",
          timeout: 60_000,
        });
        const said = JSON.stringify(extra);
        assert.equal(result.status, code, `${said}: ${result.stderr}`);
        const lines = result.stderr.trim().split("\n");
        assert.equal(lines.length, 1, `${said}: one line: ${result.stderr}`);
        assert.match(lines[0]!, line, said);
        assert.equal(readEmbeddedState(dir), undefined, `${said}: no embedded Redis started`);
        assert.deepEqual(fs.readdirSync(dir), [], `${said}: nothing written to the data dir`);
      } finally {
        fs.rmSync(dir, { recursive: true, force: true });
      }
    }
  } finally {
    busy.close();
  }
});
