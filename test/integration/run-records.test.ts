/** Run records against a real Redis: status indexes stay exact when two writers race on one run. */
import assert from "node:assert/strict";
import { after, test } from "node:test";
import { Redis } from "ioredis";
import { redisKeys } from "../../lib/redis/keys";
import { listRunSummaries, listRuns } from "../../lib/runs/list";
import { readRun, trimRuns, upsertRun } from "../../lib/runs/records";
import { RUN_STATUSES, type RunStatus } from "../../lib/runs/types";
import { startTestRedis, stopTestRedis, uniquePrefix } from "../support/redis";

const server = await startTestRedis();
const client = new Redis(server.url);
after(async () => {
  client.disconnect();
  await stopTestRedis(server);
});

const base = (id: string) => ({
  id,
  rebuild: "tiles",
  tenant: "acme",
  createdAt: Date.now(),
  jobId: "job",
  attempt: 1,
});

/** Every status filter the dashboard offers (alone, per rebuild, per rebuild and tenant) that lists `id`. */
async function statusesListing(keys: ReturnType<typeof redisKeys>, id: string): Promise<string[]> {
  const found: string[] = [];
  for (const status of RUN_STATUSES) {
    for (const filter of [{ status }, { rebuild: "tiles", status }, { rebuild: "tiles", tenant: "acme", status }]) {
      const page = await listRuns(client, keys, filter, 50);
      if (page.runs.some((run) => run.id === id)) found.push(`${status}:${Object.keys(filter).join("+")}`);
    }
  }
  return found;
}

test("two writers finishing one run differently leave it in one status index: the hash's", async () => {
  const keys = redisKeys(uniquePrefix());
  const id = "job-a1";
  await upsertRun(client, keys, { ...base(id), status: "running" });
  // The paused attempt wakes and records "superseded"; the next attempt had already closed it as
  // "aborted" from "running" too — both writers knew only "running".
  await upsertRun(client, keys, { ...base(id), status: "superseded" });
  await upsertRun(client, keys, { ...base(id), status: "aborted" });
  assert.equal((await readRun(client, keys, id))?.status, "aborted");
  assert.deepEqual(await statusesListing(keys, id), [
    "aborted:status",
    "aborted:rebuild+status",
    "aborted:rebuild+tenant+status",
  ]);
});

test("a write without a status keeps the run where it is; one with a status moves it", async () => {
  const keys = redisKeys(uniquePrefix());
  const id = "job-a2";
  await upsertRun(client, keys, { ...base(id), status: "running" });
  await upsertRun(client, keys, { ...base(id), progress: 0.5 });
  assert.deepEqual(await statusesListing(keys, id), [
    "running:status",
    "running:rebuild+status",
    "running:rebuild+tenant+status",
  ]);
  for (const status of ["rebuilt", "running", "failed"] satisfies RunStatus[]) {
    await upsertRun(client, keys, { ...base(id), status });
    assert.deepEqual(
      (await statusesListing(keys, id)).map((entry) => entry.split(":")[0]),
      [status, status, status],
    );
  }
});

test("run summaries: the same runs, order and fields as the full listing, and a trimmed record is skipped", async () => {
  const keys = redisKeys(uniquePrefix());
  const now = Date.now();
  for (let i = 0; i < 5; i++) {
    await upsertRun(client, keys, {
      ...base(`job${i}-a1`),
      createdAt: now + i,
      status: i % 2 ? "rebuilt" : "skipped",
      reason: i % 2 ? null : `skip ${i}`,
      finishedAt: now + 10 + i,
      durationMs: i * 100,
      steps: [{ name: "s", status: "done", startedAt: now, finishedAt: now + 1 }],
    });
  }
  await client.del(keys.run("job3-a1")); // trimmed while still indexed
  const full = await listRuns(client, keys, { rebuild: "tiles", tenant: "acme" }, 4);
  const summaries = await listRunSummaries(client, keys, { rebuild: "tiles", tenant: "acme" }, 4);
  assert.deepEqual(
    summaries,
    full.runs.map(({ id, status, reason, createdAt, startedAt, finishedAt, durationMs }) => ({
      id,
      status,
      reason,
      createdAt,
      startedAt,
      finishedAt,
      durationMs,
    })),
  );
  assert.deepEqual(
    summaries.map((run) => run.id),
    ["job4-a1", "job2-a1", "job1-a1"],
  );
  assert.equal(summaries[1]!.reason, "skip 2");
});

test("trimming removes a run from every index, also when its hash had already expired", async () => {
  const keys = redisKeys(uniquePrefix());
  const now = Date.now();
  for (const [i, status] of (["failed", "rebuilt", "skipped"] as const).entries()) {
    await upsertRun(client, keys, { ...base(`old${i}-a1`), createdAt: now + i, status });
  }
  await client.del(keys.run("old0-a1")); // its backstop TTL ran out before any trim
  const removed = await trimRuns(client, keys, "tiles", "acme", { maxPerRebuild: 1, maxAgeMs: 86_400_000 }, now + 10);
  assert.equal(removed, 2);
  const indexes = [
    keys.runIndex(),
    keys.runIndex({ rebuild: "tiles" }),
    keys.runIndex({ rebuild: "tiles", tenant: "acme" }),
    ...RUN_STATUSES.flatMap((status) => [
      keys.runIndex({ status }),
      keys.runIndex({ rebuild: "tiles", status }),
      keys.runIndex({ rebuild: "tiles", tenant: "acme", status }),
    ]),
  ];
  const left = new Set<string>();
  for (const index of indexes) for (const id of await client.zrange(index, "0", "-1")) left.add(id);
  assert.deepEqual([...left], ["old2-a1"], "only the newest run is indexed anywhere");
  assert.equal(await client.exists(keys.run("old1-a1")), 0);
});
