/**
 * Benchmark (not a test) of live push: how long after a change in Redis an open dashboard shows it.
 *
 * One redis-server this script starts (temp dir, no persistence, stopped by PID), the real web
 * server (`scripts/web.ts` → `next start`, stopped by PID with its descendants; built first if
 * `.next/BUILD_ID` is missing) and Debian's Chromium through Playwright, with two pages open as a
 * viewer: Claims and Runs. Changes are made the worker's way: a claim acquired and released with
 * `withClaim` (which publishes its events), a run record written running then rebuilt with the
 * run-record writer (`upsertRun`, whose MULTI carries the event).
 *
 * Each change is timed from just before the write to the moment the page's DOM shows it (a
 * MutationObserver in the page, wall clock on the same machine):
 *   phase push      — the pages alone on the server
 *   phase push_100  — the same with 100 other SSE clients connected (each reading its stream)
 *   phase poll      — /api/events blocked in the browser: the pages fall back to polling (2 s),
 *                     the behaviour before live push, for comparison
 *
 * Env: BENCH_CHANGES per phase (default 30 claim changes + 30 run changes), BENCH_SSE_CLIENTS (100).
 * Goal: p95 ≤ 300 ms with 100 clients.
 * Last line: RESULT push_p95_ms=<p95 alone> push_p95_100_ms=<p95 with 100 clients> …
 */
import { spawn, type ChildProcess } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { chromium, type Browser, type Page } from "@playwright/test";
import type { Redis } from "ioredis";
import { stringify } from "yaml";
import { withClaim } from "../lib/claims/index";
import { ensureBuild } from "../lib/launcher/children";
import { closeRedis, createRedis } from "../lib/redis/client";
import { freePort, startRedisServer, type RedisServerHandle } from "../lib/redis/embedded";
import { redisKeys, type RedisKeys } from "../lib/redis/keys";
import { writeTestRun as upsertRun } from "../test/support/runs";
import { descendantPids, isRunning, waitForLine, waitUntilGone } from "../test/support/processes";
import { numberFromEnv } from "./env";

const CHANGES = numberFromEnv("BENCH_CHANGES", 30, { min: 1 });
const SSE_CLIENTS = numberFromEnv("BENCH_SSE_CLIENTS", 100, { min: 1 });
const GOAL_MS = 300;
const PREFIX = "benchui";
const VIEWER_TOKEN = "bench-ui-viewer-token-0123456789";
const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const REBUILDS = { tiles: { output: "out/tiles", steps: [{ name: "tile", run: ["true"] }] } };
const say = (line: string) => console.log(line);

function percentile(values: number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(p * sorted.length) - 1))] ?? NaN;
}

interface WebServer {
  base: string;
  pid: number;
  stop(): Promise<void>;
}

async function startWeb(env: NodeJS.ProcessEnv, children: Set<ChildProcess>): Promise<WebServer> {
  const port = await freePort();
  const child = spawn(process.execPath, ["--import", "tsx", "scripts/web.ts"], {
    cwd: root,
    env: { ...env, PORT: String(port), HOST: "127.0.0.1", NEXT_TELEMETRY_DISABLED: "1" },
    stdio: ["ignore", "pipe", "pipe"],
  });
  children.add(child);
  child.stdout!.resume();
  child.stderr!.resume();
  await waitForLine(child, /dashboard at/, 90_000);
  let stopping: Promise<void> | undefined;
  return {
    base: `http://127.0.0.1:${port}`,
    pid: child.pid!,
    stop() {
      stopping ??= (async () => {
        const descendants = descendantPids(child.pid!);
        if (child.exitCode === null && child.signalCode === null) child.kill("SIGTERM");
        const left = await waitUntilGone([child.pid!, ...descendants], 15_000);
        for (const pid of left) {
          try {
            process.kill(pid, "SIGKILL");
          } catch {
            // gone meanwhile
          }
        }
        await waitUntilGone(left, 5_000);
        children.delete(child);
        if (left.some(isRunning)) say(`warning: processes ${left.join(", ")} did not stop`);
      })();
      return stopping;
    },
  };
}

/**
 * In the page: `__benchWaitFor(selector, present)` resolves with the wall-clock time at which
 * `selector` matches (or stops matching). A string, not a function: tsx's transform would add
 * helpers the page does not have.
 */
const INSTALL_WATCHER = `window.__benchWaitFor = (selector, present) => new Promise((resolve) => {
  const check = () => Boolean(document.querySelector(selector)) === present;
  if (check()) return resolve(Date.now());
  const observer = new MutationObserver(() => {
    if (check()) { observer.disconnect(); resolve(Date.now()); }
  });
  observer.observe(document.body, { subtree: true, childList: true, attributes: true });
});`;

/** Milliseconds from `change()` starting to `page` showing `selector` (present or gone). */
async function timeChange(page: Page, selector: string, present: boolean, change: () => Promise<unknown>) {
  const seen = page.evaluate(`window.__benchWaitFor(${JSON.stringify(selector)}, ${present})`) as Promise<number>;
  const started = Date.now();
  await change();
  const at = await Promise.race([
    seen,
    new Promise<number>((_, reject) =>
      setTimeout(() => reject(new Error(`page never showed ${selector}`)), 30_000).unref(),
    ),
  ]);
  return at - started;
}

async function openPage(browser: Browser, base: string, pathname: string, live: boolean): Promise<Page> {
  const context = await browser.newContext({ extraHTTPHeaders: { authorization: `Bearer ${VIEWER_TOKEN}` } });
  const page = await context.newPage();
  if (!live) await page.route("**/api/events*", (route) => route.abort("connectionrefused"));
  await page.goto(`${base}${pathname}`, { timeout: 30_000 });
  await page.evaluate(INSTALL_WATCHER);
  await page
    .getByRole("status", { name: "Live updates" })
    .and(page.locator(`[data-live="${live ? "live" : "offline"}"]`))
    .waitFor({ timeout: 30_000 });
  await page.waitForTimeout(500); // let the re-read after connecting settle
  return page;
}

/** One phase: claim acquire + release on Claims, run running → rebuilt on Runs; latencies in ms. */
async function runPhase(
  label: string,
  browser: Browser,
  base: string,
  redis: { main: Redis; claims: Redis; keys: RedisKeys },
  live: boolean,
  changes: number,
): Promise<number[]> {
  const claimsPage = await openPage(browser, base, "/claims", live);
  const runsPage = await openPage(browser, base, "/runs", live);
  const samples: number[] = [];
  for (let i = 0; i < changes; i++) {
    const name = `output:/bench/ui/${label}/${i}`;
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    let held!: Promise<unknown>;
    samples.push(
      await timeChange(claimsPage, `tr[data-claim="${name}"]`, true, async () => {
        let acquired!: () => void;
        const isHeld = new Promise<void>((resolve) => (acquired = resolve));
        held = withClaim(
          redis.claims,
          redis.keys,
          name,
          { rebuild: "tiles", version: `v${i}`, workerId: "bench", jobId: `bench-${label}-${i}` },
          async () => {
            acquired();
            await released;
          },
          { ttlMs: 60_000, refreshEveryMs: 20_000 },
        );
        await isHeld;
      }),
    );
    samples.push(
      await timeChange(claimsPage, `tr[data-claim="${name}"]`, false, async () => {
        release();
        await held;
      }),
    );

    const id = `bench-${label}-${i}-a1`;
    const createdAt = Date.now();
    const record = { id, rebuild: "tiles", tenant: null, createdAt };
    await upsertRun(redis.main, redis.keys, {
      ...record,
      jobId: `bench-${label}-${i}`,
      attempt: 1,
      status: "running",
      startedAt: createdAt,
    });
    await runsPage.locator(`tr[data-run="${id}"]`).waitFor({ timeout: 30_000 });
    samples.push(
      await timeChange(runsPage, `tr[data-run="${id}"][data-status="rebuilt"]`, true, () =>
        upsertRun(redis.main, redis.keys, {
          ...record,
          status: "rebuilt",
          finishedAt: Date.now(),
          durationMs: Date.now() - createdAt,
        }),
      ),
    );
  }
  await claimsPage.context().close();
  await runsPage.context().close();
  say(
    `${label.padEnd(9)} ${samples.length} changes: p50 ${percentile(samples, 0.5)} ms, p95 ${percentile(samples, 0.95)} ms, ` +
      `max ${Math.max(...samples)} ms`,
  );
  return samples;
}

/**
 * `count` SSE clients reading /api/events, in a child process of their own (other browsers are
 * other processes too; it also keeps their reading off this process's event loop). Resolves once
 * all are connected; `stop()` ends the child by PID.
 */
const SSE_CLIENTS_SCRIPT = `
const [base, token, count] = process.argv.slice(1);
let chunks = 0;
const responses = await Promise.all(Array.from({ length: Number(count) }, () =>
  fetch(base + "/api/events", { headers: { authorization: "Bearer " + token } })));
for (const response of responses) {
  if (response.status !== 200) { console.log("status " + response.status); process.exit(1); }
  const reader = response.body.getReader();
  (async () => { for (;;) { const { done } = await reader.read(); if (done) return; chunks += 1; } })();
}
console.log("connected " + responses.length);
process.on("SIGTERM", () => { console.log("chunks " + chunks); process.exit(0); });
`;

async function connectSseClients(base: string, count: number, children: Set<ChildProcess>) {
  const child = spawn(
    process.execPath,
    ["--input-type=module", "-e", SSE_CLIENTS_SCRIPT, base, VIEWER_TOKEN, String(count)],
    {
      stdio: ["ignore", "pipe", "inherit"],
    },
  );
  children.add(child);
  let output = "";
  child.stdout!.on("data", (chunk: Buffer) => (output += chunk.toString()));
  await waitForLine(child, /^connected \d+/m, 60_000);
  return {
    stop: async () => {
      const exited = new Promise((resolve) => child.once("exit", resolve));
      child.kill("SIGTERM");
      await exited;
      children.delete(child);
      return Number(/chunks (\d+)/.exec(output)?.[1] ?? NaN);
    },
  };
}

async function main(): Promise<void> {
  if (!ensureBuild(root, (line) => say(line))) throw new Error("`next build` failed");
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "claimwatch-bench-ui-"));
  const configFile = path.join(dir, "claimwatch.yaml");
  fs.writeFileSync(configFile, stringify({ rebuilds: REBUILDS }));
  const children = new Set<ChildProcess>();
  let server: RedisServerHandle | undefined;
  let web: WebServer | undefined;
  let browser: Browser | undefined;
  let main: Redis | undefined;
  let claims: Redis | undefined;
  const cleanUp = async () => {
    await browser?.close().catch(() => {});
    await web?.stop();
    await closeRedis(main);
    await closeRedis(claims);
    await server?.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  };
  const onSignal = () => void cleanUp().finally(() => process.exit(130));
  process.once("SIGINT", onSignal);
  process.once("SIGTERM", onSignal);
  try {
    server = await startRedisServer({ dir, extraArgs: ["--appendonly", "no", "--save", ""] });
    main = createRedis(server.url, "worker", "bench-ui:main");
    claims = createRedis(`${server.url}/1`, "worker", "bench-ui:claims");
    const keys = redisKeys(PREFIX);
    web = await startWeb(
      {
        ...process.env,
        REDIS_URL: server.url,
        CLAIMS_REDIS_URL: "",
        CLAIMWATCH_CONFIG: configFile,
        CLAIMWATCH_DATA_DIR: path.join(dir, ".data"),
        CLAIMWATCH_KEY_PREFIX: PREFIX,
        CLAIMWATCH_VIEWER_TOKEN: `bench:${VIEWER_TOKEN}`,
        CLAIMWATCH_OPERATOR_TOKEN: "",
      },
      children,
    );
    browser = await chromium.launch({
      executablePath: process.env.CHROMIUM_PATH ?? "/usr/bin/chromium",
      args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"],
    });
    say(
      `redis-server pid ${server.pid}, web server pid ${web.pid} at ${web.base}; ${CHANGES} claim acquire+release ` +
        `and ${CHANGES} run finishes per phase`,
    );
    const redis = { main, claims, keys };
    const alone = await runPhase("push", browser, web.base, redis, true, CHANGES);
    const others = await connectSseClients(web.base, SSE_CLIENTS, children);
    say(`${SSE_CLIENTS} other SSE clients connected`);
    const crowded = await runPhase("push_100", browser, web.base, redis, true, CHANGES);
    const chunks = await others.stop();
    say(`the ${SSE_CLIENTS} other clients received ${chunks} chunks meanwhile`);
    const polled = await runPhase("poll", browser, web.base, redis, false, Math.max(5, Math.round(CHANGES / 3)));
    const p95 = percentile(crowded, 0.95);
    say(`goal: p95 ≤ ${GOAL_MS} ms with ${SSE_CLIENTS} clients: ${p95} ms ${p95 <= GOAL_MS ? "met" : "MISSED"}`);
    say(
      `RESULT push_p95_ms=${percentile(alone, 0.95)} push_p95_100_ms=${p95} push_p50_ms=${percentile(alone, 0.5)} ` +
        `push_p50_100_ms=${percentile(crowded, 0.5)} poll_p95_ms=${percentile(polled, 0.95)} ` +
        `poll_p50_ms=${percentile(polled, 0.5)}`,
    );
  } finally {
    process.off("SIGINT", onSignal);
    process.off("SIGTERM", onSignal);
    await cleanUp();
  }
}

await main();
