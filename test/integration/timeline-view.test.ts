/**
 * The timeline's 24 h view shows the runs one by one only when they are the day's runs: once
 * retention trimmed runs of the window (the counters count more than the run index holds), it
 * shows the counted buckets (black-box helper-181: about 100 kept of 4 000 shown as the day).
 * Real redis-server; lib/api called directly with a context of real connections.
 */
import assert from "node:assert/strict";
import { after, test } from "node:test";
import { getTimeline } from "../../lib/api/timeline";
import { parseDefinitions } from "../../lib/rebuilds/definitions";
import { createRedis } from "../../lib/redis/client";
import { redisKeys } from "../../lib/redis/keys";
import { serverNow } from "../../lib/redis/time";
import { DEFAULT_RETENTION } from "../../lib/runs/records";
import { trimRuns } from "../../lib/runs/trim";
import { importRunInto } from "../../lib/runs/writer";
import type { WebContext } from "../../lib/web/context";
import { startTestRedis, stopTestRedis, uniquePrefix } from "../support/redis";

const server = await startTestRedis();
const main = createRedis(server.url, "worker");
after(async () => {
  main.disconnect();
  await stopTestRedis(server);
});

test("a day whose runs retention trimmed is shown as counted buckets, not as the runs it kept", async () => {
  const parsed = parseDefinitions(
    { rebuilds: { quick: { output: "/srv/out/quick", steps: [{ name: "s", run: ["true"] }] } } },
    "/srv/claimwatch.yaml",
  );
  assert.ok(parsed.ok);
  const keys = redisKeys(uniquePrefix("timeline-view"));
  const context = {
    definitions: parsed.definitions,
    connections: { keys, main, claims: main, urls: { main: server.url, claims: server.url }, close: async () => {} },
  } as unknown as WebContext;
  const now = await serverNow(main);
  const tx = main.multi();
  for (let i = 0; i < 30; i++) {
    const at = now - 5 * 3_600_000 + i * 60_000;
    importRunInto(
      tx,
      keys,
      {
        id: `day-${i}-a1`,
        jobId: `day-${i}`,
        attempt: 1,
        rebuild: "quick",
        tenant: null,
        version: `v${i}`,
        status: "rebuilt",
        reason: "published",
        trigger: "api",
        workerId: "w",
        host: "h",
        createdAt: at,
        startedAt: at,
        finishedAt: at + 1_000,
        durationMs: 1_000,
        fence: i + 1,
        buildHash: null,
        idempotencyKey: null,
        progress: 1,
        steps: [],
      },
      DEFAULT_RETENTION,
    );
  }
  await tx.exec();
  const day = () => getTimeline(context, { range: "24h", view: "auto" });
  const before = await day();
  assert.equal(before.view, "runs", "every run of the day is kept: one by one");
  assert.equal(before.runs.length, 30);
  // Retention keeps the newest 10 of the rebuild.
  const trimmed = await trimRuns(main, keys, {
    rebuild: "quick",
    tenant: null,
    retention: { ...DEFAULT_RETENTION, maxPerRebuild: 10 },
  });
  assert.equal(trimmed, 20);
  const after = await day();
  assert.equal(after.view, "buckets", "the day held more runs than retention kept");
  const rebuilt = after.counted?.lanes.flatMap((lane) => lane.runs.rebuilt ?? []) ?? [];
  assert.equal(
    rebuilt.reduce((a, b) => a + b, 0),
    30,
    "the counters count the trimmed runs too",
  );
});
