/**
 * A requested rebuild that a failover could lose is not answered as queued
 * (`CLAIMWATCH_TRIGGER_REPLICAS`, lib/redis/replicas.ts): the real web server, a real primary and
 * its real asynchronous replica, which is SIGSTOPped as a lagging or cut-off replica would be.
 *
 * - replica in sync: `POST /api/rebuilds/{name}/runs` is 202 queued;
 * - replica stopped: the same request is 503 `not-replicated`, naming the job and the variable
 *   (the job is on the primary: a worker may still run it, and a repeat is harmless);
 * - meanwhile `GET /api/health` names the setting that cannot be met (none while in sync, none
 *   once the replica is back);
 * - replica back: the request sent again is 202 (the waiting job, deduplicated);
 * - with `min-replicas-to-write 1` on the primary, a primary whose replica stopped acknowledging
 *   refuses writes (NOREPLICAS): the API answers 503 `unavailable`, not a 500.
 *
 * Can it fail? Without the WAIT in triggerRebuild the stopped replica's request is 202, and
 * without NOREPLICAS among the unavailable errors (lib/api/errors.ts) the last one is a 500;
 * without `triggerReplicaProblems` in the health report the warning never comes.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { Redis } from "ioredis";
import { startTestRedis, type TestRedis } from "../support/redis";
import { createTestBed, startWebServer, type TestBed } from "../support/stack";
import { until } from "../support/until";

const OPERATOR_TOKEN = "replicas-test-operator-token-0123";
let bed: TestBed;
let replica: TestRedis;
let base: string;
let stopWeb: (() => Promise<void>) | undefined;
const stopped = new Set<number>();

before(async () => {
  const primary = await startTestRedis();
  replica = await startTestRedis(["--replicaof", "127.0.0.1", String(primary.port)]);
  bed = await createTestBed(
    { nightly: { output: "out/nightly", steps: [{ name: "s", run: ["true"] }] } },
    {},
    { redis: primary },
  );
  await until("the replica is in sync", async () => /master_link_status:up/.test(await info(replica)), 30_000);
  const web = await startWebServer(bed, {
    CLAIMWATCH_OPERATOR_TOKEN: `tester:${OPERATOR_TOKEN}`,
    CLAIMWATCH_TRIGGER_REPLICAS: "1",
  });
  base = web.url;
  stopWeb = web.stop;
});
after(async () => {
  for (const pid of stopped) process.kill(pid, "SIGCONT");
  await stopWeb?.();
  await bed?.close();
});

async function info(server: TestRedis): Promise<string> {
  const client = new Redis(server.port, "127.0.0.1", { maxRetriesPerRequest: 0 });
  client.on("error", () => {});
  try {
    return await client.info("replication");
  } finally {
    client.disconnect();
  }
}

async function trigger(version: string) {
  const response = await fetch(`${base}/api/rebuilds/nightly/runs`, {
    method: "POST",
    headers: { authorization: `Bearer ${OPERATOR_TOKEN}`, "content-type": "application/json" },
    body: JSON.stringify({ version }),
  });
  return { status: response.status, body: (await response.json()) as Record<string, unknown> };
}

const pause = (pid: number) => {
  process.kill(pid, "SIGSTOP");
  stopped.add(pid);
};
const resume = (pid: number) => {
  process.kill(pid, "SIGCONT");
  stopped.delete(pid);
};

/** The problems of `GET /api/health` (as an operator sees them) that are about the replica setting. */
async function replicaProblems(): Promise<string[]> {
  const response = await fetch(`${base}/api/health`, { headers: { authorization: `Bearer ${OPERATOR_TOKEN}` } });
  const body = (await response.json()) as { problems: string[] };
  return body.problems.filter((problem) => problem.includes("CLAIMWATCH_TRIGGER_REPLICAS"));
}

test("a trigger is queued once a replica has it; with the replica cut off it is 503 not-replicated, and sent again once it is back", async () => {
  const first = await trigger("v1");
  assert.equal(first.status, 202, JSON.stringify(first.body));
  assert.equal(first.body.status, "queued");
  assert.deepEqual(await replicaProblems(), [], "a replica in sync meets the setting");

  pause(replica.pid);
  const cut = await trigger("v2");
  assert.equal(cut.status, 503, JSON.stringify(cut.body));
  const error = cut.body.error as { code: string; message: string };
  assert.equal(error.code, "not-replicated");
  assert.match(error.message, /0 of the 1 replicas \(CLAIMWATCH_TRIGGER_REPLICAS\)/);
  assert.match(error.message, /Send the request again/);
  const jobId = /job (run-[0-9a-f-]+)/.exec(error.message)?.[1];
  assert.ok(jobId, error.message);
  assert.equal(await bed.queue.getJobState(jobId), "waiting", "the job is on the primary all the same");
  // The health report names the setting that cannot be met, once the replica is behind.
  const warned = await until(
    "the health report names CLAIMWATCH_TRIGGER_REPLICAS",
    async () => (await replicaProblems()).find((problem) => /^CLAIMWATCH_TRIGGER_REPLICAS is 1, but/.test(problem)),
    30_000,
  );
  assert.match(warned, /has 0 replica\(s\) in sync: every rebuild request is answered 503 not-replicated/);

  resume(replica.pid);
  await until("the replica caught up", async () => /master_link_status:up/.test(await info(replica)), 30_000);
  await until("the health report no longer warns", async () => (await replicaProblems()).length === 0, 30_000);
  const again = await trigger("v2");
  assert.equal(again.status, 202, JSON.stringify(again.body));
  assert.deepEqual([again.body.status, again.body.jobId], ["deduplicated", jobId]);
});

test("a primary refusing writes for want of replicas (NOREPLICAS) makes the API answer 503 unavailable, not 500", async () => {
  const admin = bed.main.duplicate();
  try {
    await admin.config("SET", "min-replicas-to-write", "1");
    await admin.config("SET", "min-replicas-max-lag", "1");
    pause(replica.pid);
    // The primary counts the replica out once it has not acknowledged for over a second; from
    // then on nothing is written.
    const refused = await until(
      "the primary refuses writes",
      async () => {
        const answer = await trigger(`v${Date.now()}`);
        // Until then a trigger is taken and answered 503 not-replicated (the WAIT times out).
        const code = (answer.body.error as { code?: string } | undefined)?.code;
        return answer.status === 202 || code === "not-replicated" ? null : answer;
      },
      30_000,
    );
    assert.equal(refused.status, 503, JSON.stringify(refused.body));
    assert.equal((refused.body.error as { code: string }).code, "unavailable");
  } finally {
    resume(replica.pid);
    await admin.config("SET", "min-replicas-to-write", "0").catch(() => {});
    admin.disconnect();
  }
});
