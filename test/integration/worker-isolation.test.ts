/**
 * What one run may touch: each tenant publishes into its own directory, and a step never
 * outlives its worker (a SIGKILLed worker's step dies with it: a parent-death signal).
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { after, before, test } from "node:test";
import { claimName, readPublished } from "../../lib/claims";
import { outputDirOf } from "../../lib/rebuilds/definitions";
import { hashDirectory, readCurrent } from "../../lib/rebuilds/output";
import { killMarkedProcesses, newMarker, pidsWithMarker, waitUntilNoMarker } from "../support/markers";
import { createTestBed, type TestBed } from "../support/stack";

const marker = newMarker();
let bed: TestBed;
before(async () => {
  bed = await createTestBed({
    tenanted: {
      output: "out/tenanted",
      tenants: ["acme", "globex"],
      claim: { ttl: "3s", refreshEvery: "1s" },
      timeLimit: "1m",
      steps: [{ name: "write", run: ["sh", "-c", 'echo "$CLAIMWATCH_TENANT" > "$CLAIMWATCH_WORK/tenant.txt"'] }],
    },
    endless: {
      output: "out/endless",
      claim: { ttl: "3s", refreshEvery: "1s" },
      timeLimit: "1m",
      retries: { attempts: 1, backoff: "1s", maxBackoff: "1s" },
      // Appends a line every 100 ms, forever: only a signal ends it. Found in /proc by its marker
      // (a pid it printed itself would be its pid inside its PID namespace).
      steps: [
        {
          name: "loop",
          run: [
            "sh",
            "-c",
            'echo started >> "$0/beats"; while true; do echo beat >> "$0/beats"; sleep 0.1; done',
            "{output}",
          ],
          killGrace: "1s",
          env: { [marker.name]: marker.value },
        },
      ],
    },
  });
});
after(async () => {
  killMarkedProcesses();
  await bed.close();
});

test("each tenant has its own builds and current, matching its own published pointer", async () => {
  const worker = await bed.startWorker();
  try {
    const definition = bed.definitions.rebuilds.get("tenanted")!;
    const jobs = [
      await bed.trigger("tenanted", { tenant: "acme" }),
      await bed.trigger("tenanted", { tenant: "globex" }),
    ];
    for (const jobId of jobs) await bed.waitForRun((r) => r.jobId === jobId && r.status === "rebuilt", 20_000);
    const hashes: string[] = [];
    for (const tenant of ["acme", "globex"]) {
      const dir = outputDirOf(definition, tenant);
      const current = await readCurrent(dir);
      assert.ok(current, `${tenant} has a current`);
      assert.equal(fs.readFileSync(path.join(dir, "current", "tenant.txt"), "utf8").trim(), tenant);
      assert.equal(await hashDirectory(path.join(dir, "current")), current);
      const published = await readPublished(bed.claims, bed.keys, claimName(definition.claimPath, tenant));
      assert.equal(published?.value, current, `${tenant}'s pointer and symlink agree`);
      hashes.push(current);
    }
    assert.notEqual(hashes[0], hashes[1]);
  } finally {
    await worker.stop();
  }
});

test("a SIGKILLed worker's step process dies with it, not left writing", async () => {
  const output = bed.definitions.rebuilds.get("endless")!.outputPath;
  const beats = path.join(output, "beats");
  const worker = await bed.startWorker();
  const jobId = await bed.trigger("endless");
  await bed.waitForRun((r) => r.jobId === jobId && r.status === "running", 15_000);
  for (let i = 0; i < 100 && pidsWithMarker(marker).length === 0; i++) await new Promise((r) => setTimeout(r, 50));
  assert.ok(pidsWithMarker(marker).length > 0, "the step started");
  assert.equal(await worker.stop("SIGKILL"), null);
  assert.deepEqual((await waitUntilNoMarker(marker, 10_000)).alive, [], "the orphaned step was stopped");
  const size = fs.statSync(beats).size;
  await new Promise((r) => setTimeout(r, 500));
  assert.equal(fs.statSync(beats).size, size, "nothing writes after the step is gone");
});
