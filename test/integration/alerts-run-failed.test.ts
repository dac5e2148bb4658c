/**
 * `runFailed` resolves once a later run left the output up to date: rebuilt, or skipped because
 * its version was already rebuilt (helper-137: inputs unreadable, then back — the next run skips,
 * the output serves that version, and the alert paged on). A skip behind another holder does not
 * resolve it. The alert snapshot read from a real redis-server.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import type { Redis } from "ioredis";
import { evaluateRules } from "../../lib/alerts/rules";
import { readAlertSnapshot } from "../../lib/alerts/snapshot";
import type { FiringAlert } from "../../lib/alerts/types";
import { parseDefinitions } from "../../lib/rebuilds/definitions";
import { closeRedis, createRedis } from "../../lib/redis/client";
import { redisKeys } from "../../lib/redis/keys";
import { serverNow } from "../../lib/redis/time";
import { DEFAULT_RETENTION } from "../../lib/runs/records";
import type { FinalRunStatus } from "../../lib/runs/transitions";
import type { RunRecord } from "../../lib/runs/types";
import { trimRuns } from "../../lib/runs/trim";
import { importRunInto } from "../../lib/runs/writer";
import { startTestRedis, stopTestRedis, uniquePrefix, type TestRedis } from "../support/redis";

let server: TestRedis;
let main: Redis;
before(async () => {
  server = await startTestRedis();
  main = createRedis(`redis://127.0.0.1:${server.port}`, "worker");
});
after(async () => {
  await closeRedis(main);
  await stopTestRedis(server);
});

const parsed = parseDefinitions(
  { rebuilds: { quick: { output: "out/q", steps: [{ name: "s", run: ["true"] }] } }, alerts: {} },
  "/srv/claimwatch.yaml",
);

const record = (
  id: string,
  createdAt: number,
  status: FinalRunStatus,
  reason: string,
): RunRecord & { status: FinalRunStatus } => ({
  id,
  jobId: id.replace(/-a\d+$/, ""),
  attempt: 1,
  rebuild: "quick",
  tenant: null,
  version: "v1",
  status,
  reason,
  trigger: "api",
  workerId: "w",
  host: "h",
  createdAt,
  startedAt: createdAt,
  finishedAt: createdAt + 10,
  durationMs: 10,
  fence: null,
  buildHash: null,
  idempotencyKey: null,
  progress: 1,
  steps: [],
});

/** Finished records as they were written, into the run history under `keys`. */
function importInto(keys: ReturnType<typeof redisKeys>, records: (RunRecord & { status: FinalRunStatus })[]) {
  const tx = main.multi();
  for (const r of records) importRunInto(tx, keys, r, DEFAULT_RETENTION);
  return tx.exec();
}

test("a failure is moot once a later run is skipped as already rebuilt (the output serves its version); not after a skip behind a holder", async () => {
  assert.ok(parsed.ok);
  const { definitions } = parsed;
  const keys = redisKeys(uniquePrefix("runfailed"));
  const now = await serverNow(main);
  const importing = (records: (RunRecord & { status: FinalRunStatus })[]) => importInto(keys, records);
  const quick = async () =>
    (await readAlertSnapshot(main, main, keys, definitions, { takeoverWindowMs: 0, graceMs: 20_000 })).series.find(
      (s) => s.rebuild === "quick",
    )!;
  await importing([
    record("built-a1", now - 60_000, "rebuilt", "published build ab (fence 1)"),
    record("broken-a1", now - 50_000, "failed", "inputs unreadable: ENOENT"),
  ]);
  const failedOnly = await quick();
  assert.equal(failedOnly.newestFailed?.id, "broken-a1");
  assert.ok(failedOnly.newestUpToDateAt! < failedOnly.newestFailed!.createdAt, "the failure stands");
  // Behind another holder: says nothing about the output.
  await importing([record("held-a1", now - 40_000, "skipped", "claim-held: held by w2 building v1")]);
  assert.ok((await quick()).newestUpToDateAt! < now - 50_000, "a claim-held skip does not make the failure moot");
  // Inputs back: the next run finds its version already rebuilt.
  await importing([record("again-a1", now - 30_000, "skipped", "already-rebuilt: already rebuilt by run built-a1")]);
  assert.equal((await quick()).newestUpToDateAt, now - 30_000);
});

test("a runFailed alert whose run retention trimmed fires on until a later run leaves the output up to date (black-box helper-181)", async () => {
  assert.ok(parsed.ok);
  const { definitions } = parsed;
  const keys = redisKeys(uniquePrefix("runfailed-trimmed"));
  const now = await serverNow(main);
  const importing = (records: (RunRecord & { status: FinalRunStatus })[]) => importInto(keys, records);
  const evaluate = async (firing?: Map<string, FiringAlert>) =>
    evaluateRules(
      await readAlertSnapshot(main, main, keys, definitions, { takeoverWindowMs: 0, graceMs: 20_000 }),
      definitions.alerts!,
      { definitions, publicOrigin: "http://claimwatch.test", ...(firing ? { firing } : {}) },
    ).active.find((alert) => alert.id === "runFailed|quick|");
  await importing([record("broken-a1", now - 50_000, "failed", "inputs unreadable: ENOENT")]);
  const fired = await evaluate();
  assert.ok(fired, "the failure alerts");
  const firing = new Map([[fired.id, { ...fired, startsAt: now - 45_000 }]]);
  // Retention (runAge) takes the failed run; nothing was rebuilt since.
  assert.equal(
    await trimRuns(main, keys, {
      rebuild: "quick",
      tenant: null,
      retention: { ...DEFAULT_RETENTION, maxAgeMs: 10_000 },
    }),
    1,
  );
  assert.equal(await main.exists(keys.run("broken-a1")), 0, "trimmed");
  const kept = await evaluate(firing);
  assert.ok(kept, "still firing: the output was not brought up to date");
  assert.deepEqual(kept.annotations, fired.annotations);
  // A later run rebuilds: resolved.
  await importing([record("fixed-a1", now - 1_000, "rebuilt", "published build cd (fence 2)")]);
  assert.equal(await evaluate(firing), undefined, "resolved by the rebuild");
});
