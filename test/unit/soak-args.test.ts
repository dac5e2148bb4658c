/** The soak's command line: bad arguments get one line naming what is wrong, the usage, exit 2. */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { runTsx } from "../support/processes";

/** The soak run with `args`; it exits before it starts anything. */
const soak = (...args: string[]) => runTsx("scripts/soak.ts", args);

// Side by side: each case is a Node start-up (≈ 2 s), nothing else.
describe("soak arguments", { concurrency: true }, () => {
  for (const [args, problem] of [
    [["--bogus"], "soak: Unknown option '--bogus'"],
    [["--seconds", "3"], "soak: --seconds must be a number ≥ 10 (got 3)"],
    [["--workers", "1.5"], "soak: --workers must be a whole number ≥ 2 (got 1.5)"],
    [["--claims-persistence", "rdb"], "soak: --claims-persistence rdb needs --claims separate"],
    [["--redis", "sentinel", "--claims", "separate"], "soak: --redis sentinel runs with --claims shared only"],
    [["--input-faults", "1"], "soak: --input-faults must be a probability, 0 ≤ P < 1 (got 1)"],
    [["--clock-skews", "0,5x"], "soak: --clock-skews must be a comma-separated list of 0 or ±N[s|m|h] (got 0,5x)"],
  ] as const) {
    test(`soak ${args.join(" ")}: exit 2, the problem named, then the usage`, async () => {
      const run = await soak(...args);
      assert.equal(run.status, 2, run.stderr);
      const [first, second] = run.stderr.split("\n");
      assert.ok(first?.startsWith(problem), run.stderr);
      assert.match(second ?? "", /^usage: soak /);
      assert.equal(run.stdout, "", "nothing started");
    });
  }

  test("soak --help: the usage on stdout, exit 0", async () => {
    const run = await soak("--help");
    assert.equal(run.status, 0, run.stderr);
    assert.match(run.stdout, /^usage: soak /);
  });
});
