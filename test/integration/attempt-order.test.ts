/**
 * Takeovers go one way: an attempt whose job lock was lost before it acquired (the job was
 * redelivered, and the later attempt took the claim) never takes the claim back from that later
 * attempt. It ends `superseded`, without a retry; a later attempt still takes over. Real
 * rebuilds through `runRebuild` against a real redis-server.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { acquireClaim, claimName, readClaim } from "../../lib/claims";
import { RebuildError, runRebuild, type RebuildDeps } from "../../lib/rebuilds/run-rebuild";
import { readRun } from "../../lib/runs/records";
import { runIdOf } from "../../lib/runs/types";
import { createTestBed, rebuildDepsOf, type TestBed } from "../support/stack";

let bed: TestBed;
let deps: RebuildDeps;
before(async () => {
  bed = await createTestBed({
    ordered: {
      output: "out/ordered",
      claim: { ttl: "30s", refreshEvery: "5s" },
      steps: [{ name: "write", run: ["sh", "-c", 'echo "$CLAIMWATCH_VERSION" > "$CLAIMWATCH_WORK/v"'] }],
    },
  });
  deps = rebuildDepsOf(bed);
});
after(() => bed.close());

const job = (attempt: number) => ({
  id: "order-job",
  attempt,
  createdAt: Date.now(),
  data: { rebuild: "ordered", version: "v1", trigger: "api" as const },
  signal: new AbortController().signal,
});

test("an earlier attempt finds a later one holding the claim: it ends superseded, not retried; a later attempt takes over", async () => {
  const name = claimName(bed.definitions.rebuilds.get("ordered")!.claimPath);
  // Attempt 2 (another worker, still building) holds the claim.
  const held = await acquireClaim(
    bed.claims,
    bed.keys,
    name,
    { jobId: "order-job", attempt: 2, runId: runIdOf("order-job", 2), workerId: "w-later", version: "v1" },
    { ttlMs: 30_000, refreshEveryMs: 5_000 },
  );
  assert.equal(held.status, "acquired");
  const token = held.status === "acquired" ? held.token : "";

  // Attempt 1 comes back after losing its job lock.
  const error = await runRebuild(deps, job(1)).then(
    () => null,
    (e: unknown) => e,
  );
  assert.ok(error instanceof RebuildError, `attempt 1 threw ${String(error)}`);
  assert.equal(error.retry, false, "no retry: the later attempt carries the request on");
  const record = await readRun(bed.main, bed.keys, runIdOf("order-job", 1));
  assert.equal(record?.status, "superseded");
  assert.match(record?.reason ?? "", /later attempt/);
  const still = await readClaim(bed.claims, bed.keys, name);
  assert.equal(still?.token, token, "the later attempt keeps its claim");

  // Attempt 3 (the later attempt died; BullMQ delivered again) takes over and builds.
  const third = await runRebuild(deps, job(3));
  assert.equal(third.status, "rebuilt");
  assert.match((await readRun(bed.main, bed.keys, runIdOf("order-job", 3)))?.reason ?? "", /took over/);
});
