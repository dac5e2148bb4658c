/**
 * Nothing grows without bound (the seeds' "Redis fills up with stale result and lock keys"):
 * after 500 rebuilds the key count is what it was after 200 — jobs are removed by count,
 * idempotency keys expire, run records are trimmed, claims are released. 200 is past every
 * count limit (100 runs, 50 jobs), so the 300 rebuilds after it would show any key that grows
 * with the rebuilds (300 more of it).
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { listClaims } from "../../lib/claims";
import { PRUNING_VERSION } from "../../lib/rebuilds/prune";
import { createTestBed, type TestBed } from "../support/stack";

/** Eight tenants: eight claims, so eight jobs can run side by side without deferring. */
const TENANTS = ["t1", "t2", "t3", "t4", "t5", "t6", "t7", "t8"];
let bed: TestBed;
before(async () => {
  bed = await createTestBed(
    {
      noop: {
        output: "out/noop",
        tenants: TENANTS,
        claim: { ttl: "5s", refreshEvery: "2s" },
        timeLimit: "1m",
        idempotency: { ttl: "1s" },
        steps: [{ name: "noop", run: ["true"] }],
      },
    },
    { retention: { runs: 10, completedJobs: 50, failedJobs: 50 } },
  );
});
after(() => bed.close());

async function runBatch(from: number, to: number): Promise<void> {
  const adds = [];
  for (let i = from; i < to; i++)
    adds.push(bed.trigger("noop", { tenant: TENANTS[i % TENANTS.length]!, version: `v${i}` }));
  await Promise.all(adds);
  // A hang guard, not a speed goal: a loaded 2-core machine runs these at 10-20 per second.
  const deadline = Date.now() + 400_000;
  for (;;) {
    const counts = await bed.queue.getJobCounts("waiting", "active", "delayed", "prioritized");
    if (Object.values(counts).every((n) => n === 0)) return;
    if (Date.now() > deadline) throw new Error(`queue did not drain: ${JSON.stringify(counts)}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

/** Key kinds of one Redis database: the name after the hash tag, up to the next colon. */
async function kindsOf(client: TestBed["main"]): Promise<Record<string, number>> {
  // A test may scan; the product never does.
  const [, names] = await client.scan("0", "COUNT", "100000");
  const kinds: Record<string, number> = {};
  for (const name of names) {
    const kind = name.replace(/^\{[^}]*\}:/, "").split(":")[0]!;
    kinds[kind] = (kinds[kind] ?? 0) + 1;
  }
  return kinds;
}

interface KeyCount {
  main: number;
  claims: number;
  kinds: Record<string, number>;
  claimKinds: Record<string, number>;
}

async function keyCount(): Promise<KeyCount> {
  // Idempotency keys expire after 1 s; run records are trimmed on the next heartbeat (5 s).
  await new Promise((r) => setTimeout(r, 6_500));
  return {
    main: await bed.main.dbsize(),
    claims: await bed.claims.dbsize(),
    kinds: await kindsOf(bed.main),
    claimKinds: await kindsOf(bed.claims),
  };
}

test("500 rebuilds leave the key count where 200 left it", { timeout: 900_000 }, async () => {
  const worker = await bed.startWorker({ CLAIMWATCH_WORKER_CONCURRENCY: String(TENANTS.length) });
  try {
    await runBatch(0, 200);
    const after200 = await keyCount();
    await runBatch(200, 500);
    const after500 = await keyCount();

    const runs = await bed.allRuns();
    // Retention counts per tenant: 10 records at most each, 80 in all (reached by the 200th).
    assert.ok(runs.length <= 10 * TENANTS.length, `run records trimmed to the retention count (${runs.length})`);
    for (const tenant of TENANTS) {
      const own = runs.filter((r) => r.tenant === tenant).length;
      assert.ok(own <= 10, `${tenant}: ${own} records`);
    }
    // A job whose tenant was busy with another version waited first: those attempts are
    // recorded as deferred; every other attempt rebuilt.
    const statuses = new Map<string, number>();
    for (const run of runs) statuses.set(run.status, (statuses.get(run.status) ?? 0) + 1);
    assert.ok(
      runs.every((r) => r.status === "rebuilt" || r.status === "deferred"),
      `every run rebuilt or deferred (${JSON.stringify([...statuses])})`,
    );
    assert.ok(((await bed.queue.getJobCounts("completed")).completed ?? 0) <= 50, "completed jobs removed by count");
    // A test may scan; the product never does.
    const [, idemKeys] = await bed.main.scan("0", "MATCH", bed.keys.idempotency("*"), "COUNT", "100000");
    assert.deepEqual(idemKeys, [], "idempotency keys expired");
    // Kind by kind: nothing grows with the number of rebuilds. Run logs exist for retained runs
    // that logged a line (at most one per record); published-build check leases, one per output.
    const shown = `keys after 200: ${JSON.stringify(after200)}, after 500: ${JSON.stringify(after500)}`;
    for (const [kind, count] of Object.entries(after500.kinds)) {
      if (kind === "run-log") assert.ok(count <= runs.length, shown);
      else if (kind === "run") assert.ok(count <= 100, `run records over the retention count: ${shown}`);
      else if (kind === "build-check") assert.ok(count <= TENANTS.length, shown);
      // Run indexes: per rebuild, tenant and status — a fixed set, filled as statuses first occur.
      else if (kind === "runs") assert.ok(count <= 4 * (1 + TENANTS.length) * 12, `runs: ${shown}`);
      else assert.ok(count <= (after200.kinds[kind] ?? 0) + 2, `${kind}: ${shown}`);
    }
    // Claims Redis: no claim of a rebuilt output is left held by a run, and nothing else grows.
    // A worker's heartbeat prunes old builds under the output's own claim, and the alert
    // evaluator holds one: those may be held at the moment of counting (one worker prunes one
    // output at a time, so a fixed few — not one per rebuild).
    const { claims: held } = await listClaims(bed.claims, bed.keys);
    const heldByRuns = held.filter((c) => c.holder.version !== PRUNING_VERSION && c.holder.runId !== null);
    assert.deepEqual(
      heldByRuns.map((c) => c.name),
      [],
      `claims left held by runs: ${shown}`,
    );
    for (const [kind, count] of Object.entries(after500.claimKinds)) {
      if (kind === "claim" || kind === "claim-meta") assert.ok(count <= 3, `claims Redis ${kind}: ${shown}`);
      else assert.ok(count <= (after200.claimKinds[kind] ?? 0) + 2, `claims Redis ${kind}: ${shown}`);
    }
  } finally {
    await worker.stop();
  }
});
