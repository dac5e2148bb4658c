/**
 * A published build deleted from under `current` (an operator's `rm -rf`, a broken disk) is a
 * problem everyone sees, not "nothing to check": `verify` exits 1 naming it, the workers' build
 * check reports it (health banner, Rebuilds page) until it is published again or `current` points
 * elsewhere, and the problem says how to bring it back. Real worker, real redis-server.
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { test } from "node:test";
import { changedBuildProblems, checkPublishedBuilds, recordChangedBuild } from "../../lib/rebuilds/build-integrity";
import { MISSING_BUILD, readCurrent, verifyBuilds } from "../../lib/rebuilds/output";
import { createTestBed } from "../support/stack";

test("a published build deleted from under current: verify exits 1 naming it, the build check reports it until it is published again", async (t) => {
  const bed = await createTestBed({
    gone: {
      output: "out/gone",
      steps: [{ name: "write", run: ["sh", "-c", 'echo "built $CLAIMWATCH_VERSION" > out.txt'] }],
    },
  });
  t.after(() => bed.close());
  const worker = await bed.startWorker();
  t.after(() => worker.stop());
  const outputDir = path.join(bed.dir, "out/gone");
  const rebuilt = async (version: string, force = false) => {
    const jobId = await bed.trigger("gone", { version, force });
    return bed.waitForRun((r) => r.jobId === jobId && r.status !== "running", 60_000, `${version} ends`);
  };
  const first = await rebuilt("v1");
  assert.equal(first.status, "rebuilt");
  const hash = first.buildHash!;
  assert.deepEqual(await verifyBuilds(outputDir), { checked: 1, changed: [] });

  // Deleted as an operator would (it is read-only).
  const buildDir = path.join(outputDir, "builds", hash);
  fs.chmodSync(buildDir, 0o755);
  fs.rmSync(buildDir, { recursive: true, force: true });
  assert.equal(await readCurrent(outputDir), hash, "current still names it");

  const verified = await verifyBuilds(outputDir);
  assert.deepEqual(verified, {
    checked: 1,
    changed: [{ path: buildDir, expected: hash, actual: MISSING_BUILD, missing: true }],
  });

  const lease = bed.keys.buildCheckLease("gone", undefined);
  await bed.main.del(lease);
  const lines = await checkPublishedBuilds(bed.main, bed.keys, bed.definitions, "test");
  assert.ok(
    lines.some((line) => line.startsWith(`PUBLISHED BUILD MISSING: ${buildDir}`)),
    lines.join(" | "),
  );
  const problems = await changedBuildProblems(bed.main, bed.keys);
  assert.equal(problems.length, 1, problems.join(" | "));
  assert.match(
    problems[0]!,
    /^The published build of gone is missing from disk: current points at .*, which is gone .*rebuild its version with force/,
  );

  // Still missing: still reported (a gone build clears a changed one's report, not this one's).
  await bed.main.del(lease);
  await checkPublishedBuilds(bed.main, bed.keys, bed.definitions, "test");
  assert.equal((await changedBuildProblems(bed.main, bed.keys)).length, 1, "listed while it is missing");

  // Back on disk but with other bytes (a partial restore): a changed build, not a missing one.
  fs.mkdirSync(buildDir);
  fs.writeFileSync(path.join(buildDir, "out.txt"), "restored wrong\n");
  await checkPublishedBuilds(bed.main, bed.keys, bed.definitions, "test");
  const changed = await changedBuildProblems(bed.main, bed.keys);
  assert.equal(changed.length, 1, changed.join(" | "));
  assert.match(changed[0]!, /^Published build of gone changed on disk: .* no longer matches its hash/);
  fs.rmSync(buildDir, { recursive: true, force: true });

  // A repeat without force is skipped (already rebuilt); with force it is published again, and
  // the next check clears the report at once (no wait for the check's 10-minute lease).
  assert.equal((await rebuilt("v1")).status, "skipped");
  assert.equal((await rebuilt("v1", true)).status, "rebuilt");
  assert.equal(fs.readFileSync(path.join(outputDir, "current", "out.txt"), "utf8"), "built v1\n");
  const after = await checkPublishedBuilds(bed.main, bed.keys, bed.definitions, "test");
  assert.deepEqual(
    await changedBuildProblems(bed.main, bed.keys),
    [],
    `cleared once whole again: ${after.join(" | ")}`,
  );
  assert.deepEqual(await verifyBuilds(outputDir), { checked: 1, changed: [] });
});

test("a changed build of a tenant (or rebuild) taken out of the definitions is no longer reported: its advice could not be followed", async (t) => {
  const bed = await createTestBed({
    kept: { output: "out/kept", tenants: ["acme"], steps: [{ name: "s", run: ["true"] }] },
  });
  t.after(() => bed.close());
  const report = (rebuild: string, tenant: string | null) => {
    const dir = path.join(bed.dir, "out", rebuild, tenant ?? "", "builds", "0".repeat(32));
    fs.mkdirSync(dir, { recursive: true });
    fs.writeFileSync(path.join(dir, "f"), "changed\n");
    return recordChangedBuild(bed.main, bed.keys, {
      path: dir,
      rebuild,
      tenant,
      expected: "0".repeat(32),
      actual: "1".repeat(32),
      foundAt: Date.now(),
      foundBy: "test",
    });
  };
  await report("kept", "acme");
  await report("kept", "initech"); // a tenant removed since
  await report("dropped", null); // a rebuild removed since
  // The defined one is re-hashed under its lease: held, so it stays as found.
  await bed.main.set(bed.keys.buildCheckLease("kept", "acme"), "other", "PX", 60_000);
  const lines = await checkPublishedBuilds(bed.main, bed.keys, bed.definitions, "test");
  assert.deepEqual(lines.filter((line) => line.includes("no longer defined")).length, 2, lines.join(" | "));
  const problems = await changedBuildProblems(bed.main, bed.keys);
  assert.equal(problems.length, 1, problems.join(" | "));
  assert.match(problems[0]!, /kept\/acme/);
});
