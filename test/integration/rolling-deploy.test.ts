/**
 * A rolling deploy that adds a rebuild or a tenant: a job for it can reach a worker still on the
 * old definitions (black-box helper-153: it was failed for good, "unknown rebuild", the request
 * lost). That worker now keeps the request for a worker that declares it — deferred, no retry
 * spent — when the job was queued by a process whose definitions declared it (lib/rebuilds/
 * declared.ts); a job nobody declared still fails at once (run-history.test.ts). Real workers.
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { after, test } from "node:test";
import { stringify } from "yaml";
import { loadDefinitions } from "../../lib/rebuilds/definitions";
import { DECLARED_FOR_MS, declareTarget } from "../../lib/rebuilds/declared";
import { RebuildError, runRebuild, UNDECLARED_PICKUPS } from "../../lib/rebuilds/run-rebuild";
import { triggerRebuild } from "../../lib/rebuilds/trigger";
import { readRun } from "../../lib/runs/records";
import { runIdOf } from "../../lib/runs/types";
import { createTestBed, rebuildDepsOf, slowStep, type TestBed } from "../support/stack";

const beds: TestBed[] = [];
after(async () => {
  for (const bed of beds) await bed.close();
});

const OLD = {
  c: { output: "out/c", steps: [slowStep(0)] },
  t: { output: "out/t", tenants: ["a"], steps: [slowStep(0)] },
};
const NEW = {
  ...OLD,
  fresh: { output: "out/fresh", steps: [slowStep(0)] },
  t: { ...OLD.t, tenants: ["a", "b"] },
};

test("a job for a rebuild or tenant only the new definitions declare waits on an old worker (deferred, the request kept) and is rebuilt by a new one", async () => {
  const bed = await createTestBed(OLD);
  beds.push(bed);
  const newFile = path.join(bed.dir, "claimwatch-new.yaml");
  fs.writeFileSync(newFile, stringify({ rebuilds: NEW }));
  const loaded = loadDefinitions(newFile);
  if (!loaded.ok) throw loaded.error;

  const old = await bed.startWorker();
  // Queued by a server that has the new file already.
  const jobs: string[] = [];
  for (const [name, tenant] of [
    ["fresh", undefined],
    ["t", "b"],
  ] as const) {
    const result = await triggerRebuild(bed.queue, bed.main, bed.keys, loaded.definitions, name, {
      version: "v1",
      ...(tenant ? { tenant } : {}),
    });
    assert.equal(result.status, "queued", JSON.stringify(result));
    jobs.push(result.jobId!);
  }
  for (const jobId of jobs) {
    const deferred = await bed.waitForRun(
      (r) => r.jobId === jobId && r.status === "deferred",
      30_000,
      `${jobId} deferred`,
    );
    assert.match(deferred.reason ?? "", /deferred, the request is kept for a worker whose definitions declare it/);
    assert.match(deferred.reason ?? "", /unknown rebuild 'fresh'|'b' is not a tenant of rebuild 't'/);
    assert.equal(deferred.fence, null, "no claim taken");
  }
  assert.equal((await bed.allRuns()).filter((r) => r.status === "failed").length, 0, "nothing failed");
  await old.stop();

  // The deploy goes on: the old worker is replaced by one with the new file.
  const updated = await bed.startWorker({ CLAIMWATCH_CONFIG: newFile });
  for (const jobId of jobs) {
    const rebuilt = await bed.waitForRun(
      (r) => r.jobId === jobId && r.status === "rebuilt",
      60_000,
      `${jobId} rebuilt`,
    );
    assert.ok(rebuilt.attempt >= 2, "a later pickup");
  }
  await updated.stop();
  assert.equal((await bed.allRuns()).filter((r) => r.status === "failed").length, 0, "nothing failed");
});

test("a declared job no worker that knows it takes within the bound fails, naming what to do; one nobody declared fails at once", async () => {
  const bed = await createTestBed(OLD);
  beds.push(bed);
  const deps = rebuildDepsOf(bed);
  const job = (id: string, rebuild: string, attempt: number) => ({
    id,
    attempt,
    createdAt: Date.now(),
    data: { rebuild, version: "v1", trigger: "api" as const },
    signal: new AbortController().signal,
  });
  const failure = (attempt: Promise<unknown>) =>
    attempt.then(
      (outcome) => assert.fail(`not failed: ${JSON.stringify(outcome)}`),
      (error: unknown) => error,
    );

  const never = await failure(runRebuild(deps, job("never", "never-declared", 1)));
  assert.ok(never instanceof RebuildError && !never.retry, String(never));
  assert.match(
    never.message,
    /^unknown rebuild 'never-declared' \(not in this worker's definitions file, .*claimwatch\.yaml\)$/,
  );

  // Declared long ago (a rebuild taken out of every file since): failed at once too.
  await bed.main.hset(bed.keys.declaredTargets, "fresh", String(Date.now() - DECLARED_FOR_MS - 60_000));
  const stale = await failure(runRebuild(deps, job("stale", "fresh", 1)));
  assert.ok(stale instanceof RebuildError && !stale.retry, String(stale));
  await declareTarget(bed.main, bed.keys, "fresh");
  const early = await runRebuild(deps, job("early", "fresh", 1));
  assert.equal(early.status, "deferred");
  const late = await failure(runRebuild(deps, job("late", "fresh", UNDECLARED_PICKUPS)));
  assert.ok(late instanceof RebuildError && !late.retry, String(late));
  assert.match(
    late.message,
    /no worker that declares it took the job in 40 pickups .*give the workers the definitions file that declares it, then retry the run/,
  );
  const record = await readRun(bed.main, bed.keys, runIdOf("late", UNDECLARED_PICKUPS));
  assert.equal(record?.status, "failed");
  assert.equal(record?.reason, late.message);
});

test("a rebuild renamed by a deploy, then rolled back: a request for a version the old name built before, published over by the new name since, builds again (black-box helper-180)", async () => {
  const versionStep = { name: "v", run: ["sh", "-c", 'echo "$CLAIMWATCH_VERSION" > "$CLAIMWATCH_WORK/v"'] };
  const bed = await createTestBed({ tiles: { output: "out/tiles", steps: [versionStep] } });
  beds.push(bed);
  // The deploy's file: the same output under a new name (one file refuses two names for one output;
  // two files, old and new workers side by side or a rollback, do not know of each other).
  const renamedFile = path.join(bed.dir, "claimwatch-renamed.yaml");
  fs.writeFileSync(renamedFile, stringify({ rebuilds: { tiles2: { output: "out/tiles", steps: [versionStep] } } }));
  const renamed = loadDefinitions(renamedFile);
  if (!renamed.ok) throw renamed.error;
  const oldDeps = rebuildDepsOf(bed);
  const newDeps = { ...oldDeps, definitions: renamed.definitions };
  const output = bed.definitions.rebuilds.get("tiles")!.outputPath;
  assert.equal(renamed.definitions.rebuilds.get("tiles2")!.outputPath, output, "one output");
  const job = (id: string, rebuild: string, version: string) => ({
    id,
    attempt: 1,
    createdAt: Date.now(),
    data: { rebuild, version, trigger: "api" as const },
    signal: new AbortController().signal,
  });
  const served = () => fs.readFileSync(path.join(output, "current", "v"), "utf8").trim();

  assert.equal((await runRebuild(oldDeps, job("old-v1", "tiles", "v1"))).status, "rebuilt");
  assert.equal(served(), "v1");
  assert.equal((await runRebuild(newDeps, job("new-v2", "tiles2", "v2"))).status, "rebuilt");
  assert.equal(served(), "v2");
  // Rolled back: the old name asks for v1 again. The output serves v2: v1 is not rebuilt now.
  const again = await runRebuild(oldDeps, job("old-v1-again", "tiles", "v1"));
  assert.equal(again.status, "rebuilt", JSON.stringify(again));
  assert.equal(served(), "v1");
  // And the other way round: the new name's v2, published over by the old name since, builds too.
  const back = await runRebuild(newDeps, job("new-v2-again", "tiles2", "v2"));
  assert.equal(back.status, "rebuilt", JSON.stringify(back));
  assert.equal(served(), "v2");
  // A repeat of what the output serves now is still skipped, whichever name published it.
  const repeat = await runRebuild(newDeps, job("new-v2-repeat", "tiles2", "v2"));
  assert.equal(repeat.status, "skipped", JSON.stringify(repeat));
});
