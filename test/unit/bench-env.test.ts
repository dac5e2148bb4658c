/** The benchmarks' BENCH_* settings: a bad value is one line naming it, exit 2, before anything starts. */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { describe, test } from "node:test";

const bench = (script: string, env: Record<string, string>) =>
  new Promise<{ status: number | null; stdout: string; stderr: string }>((resolve) => {
    execFile(
      process.execPath,
      ["--import", "tsx", script],
      { encoding: "utf8", timeout: 60_000, env: { ...process.env, ...env } },
      (error, stdout, stderr) =>
        resolve({ status: error ? (typeof error.code === "number" ? error.code : null) : 0, stdout, stderr }),
    );
  });

describe("bench settings", { concurrency: true }, () => {
  for (const [script, env, line] of [
    ["bench/worker.ts", { BENCH_ROUNDS: "abc" }, 'bench: BENCH_ROUNDS must be a whole number ≥ 1 (got "abc")'],
    [
      "bench/worker.ts",
      { BENCH_ONLY: "repeat,bogus" },
      'bench: BENCH_ONLY must be a comma-separated list of raw, floor, naive, pipeline, repeat (got "repeat,bogus")',
    ],
    ["bench/api.ts", { BENCH_RUNS_LARGE: "1e3x" }, 'bench: BENCH_RUNS_LARGE must be a whole number ≥ 1 (got "1e3x")'],
    ["bench/claims.ts", { BENCH_CYCLES: "0" }, 'bench: BENCH_CYCLES must be a whole number ≥ 1 (got "0")'],
  ] as const) {
    test(`${script} with ${JSON.stringify(env)}: exit 2, the variable named`, async () => {
      const run = await bench(script, env);
      assert.equal(run.status, 2, run.stderr);
      assert.equal(run.stderr, `${line}\n`);
      assert.equal(run.stdout, "", "nothing started");
    });
  }
});
