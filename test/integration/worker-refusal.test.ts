/**
 * A worker that refuses its definitions file (an edit with a mistake, then a restart) exits before
 * it beats: the dashboard said only "no worker is running … paused, killed or cut off" and advised
 * starting one (black-box helper-152). Its start now leaves a note the health report names, until
 * a worker starts. Real worker processes against a real Redis.
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { after, test } from "node:test";
import { checkHealth } from "../../lib/health/health";
import { createTestBed, slowStep, type TestBed } from "../support/stack";
import { until } from "../support/until";

const beds: TestBed[] = [];
after(async () => {
  for (const bed of beds) await bed.close();
});

test("a worker start that refuses its definitions file is named in the health report, with the file's problem, until a worker starts", async () => {
  const bed = await createTestBed({ c: { output: "out/c", steps: [slowStep(0)] } });
  beds.push(bed);
  const bad = path.join(bed.dir, "claimwatch-bad.yaml");
  fs.writeFileSync(
    bad,
    "rebuilds:\n  c:\n    output: out/c\n    claim: { ttl: 2m, refreshEvery: 90s }\n    steps: [{ name: s, run: [true] }]\n",
  );
  const refused = await bed.startWorker({ CLAIMWATCH_CONFIG: bad }, { until: /definitions error/ });
  const code =
    refused.child.exitCode ?? (await new Promise<number | null>((resolve) => refused.child.once("exit", resolve)));
  assert.equal(code, 2, "exit 2: a configuration error");
  const health = () => checkHealth({ main: bed.main, claims: bed.claims, keys: bed.keys });
  const problem = (await until("the refusal named", async () => {
    const found = (await health()).problems.find((p) => p.startsWith("A worker refused to start"));
    return found ?? false;
  })) as string;
  assert.match(
    problem,
    /its definitions file has a problem: .*claimwatch-bad\.yaml:\d+: rebuilds\.c\.claim\.refreshEvery/,
  );
  // The file the worker read, by its full path, whatever the worker's working directory (helper-160).
  assert.ok(problem.includes(`${bad}:`), problem);
  assert.match(problem, /Fix the file/);

  const worker = await bed.startWorker();
  await until("the note cleared by a worker's start", async () =>
    (await health()).problems.every((p) => !p.startsWith("A worker refused to start")),
  );
  await worker.stop();
});
