/** The benchmarks' BENCH_* settings: a bad value is one line naming it, exit 2, before anything starts. */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { runTsx } from "../support/processes";

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
      const run = await runTsx(script, [], env);
      assert.equal(run.status, 2, run.stderr);
      assert.equal(run.stderr, `${line}\n`);
      assert.equal(run.stdout, "", "nothing started");
    });
  }
});
