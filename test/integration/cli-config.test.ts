/** The process edges: a bad environment stops each entry point with one line and exit code 2. */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { test } from "node:test";

const entryPoints = [
  ["npm start", "scripts/start.ts"],
  ["npm run web", "scripts/web.ts"],
  ["npm run worker", "worker/index.ts"],
] as const;

for (const [label, script] of entryPoints) {
  for (const [variable, value] of [
    ["PORT", "not-a-port"],
    ["REDIS_URL", "localhost:6379"],
  ] as const) {
    test(`${label} with ${variable}=${value} exits 2 with one line naming ${variable}`, () => {
      const result = spawnSync(process.execPath, ["--import", "tsx", script], {
        env: { ...process.env, [variable]: value, CLAIMWATCH_DATA_DIR: "/nonexistent/claimwatch-test" },
        encoding: "utf8",
        timeout: 30_000,
      });
      assert.equal(result.status, 2, `stdout: ${result.stdout}\nstderr: ${result.stderr}`);
      const lines = result.stderr.trim().split("\n");
      assert.equal(lines.length, 1, result.stderr);
      assert.match(lines[0]!, new RegExp(`configuration error: ${variable}: `));
    });
  }
}

test("npm run worker without REDIS_URL and no embedded Redis running says how to fix it, exit 2", () => {
  const env: NodeJS.ProcessEnv = { ...process.env, CLAIMWATCH_DATA_DIR: "/nonexistent/claimwatch-test" };
  delete env.REDIS_URL;
  const result = spawnSync(process.execPath, ["--import", "tsx", "worker/index.ts"], {
    env,
    encoding: "utf8",
    timeout: 30_000,
  });
  assert.equal(result.status, 2, result.stderr);
  assert.match(result.stderr, /REDIS_URL is not set and no embedded Redis is running/);
});

for (const [label, script] of [entryPoints[0], entryPoints[2]]) {
  test(`${label} with CLAIMWATCH_STEP_CONTAINMENT=bogus exits 2 with one line naming it, before anything starts`, () => {
    const result = spawnSync(process.execPath, ["--import", "tsx", script], {
      env: {
        ...process.env,
        CLAIMWATCH_STEP_CONTAINMENT: "bogus",
        // A well-formed URL nothing answers at: the check must come before any connection.
        REDIS_URL: "redis://127.0.0.1:1",
        CLAIMWATCH_DATA_DIR: "/nonexistent/claimwatch-test",
      },
      encoding: "utf8",
      timeout: 60_000,
    });
    assert.equal(result.status, 2, `stdout: ${result.stdout}\nstderr: ${result.stderr}`);
    const lines = result.stderr.trim().split("\n");
    assert.equal(lines.length, 1, result.stderr);
    assert.match(lines[0]!, /configuration error: CLAIMWATCH_STEP_CONTAINMENT="bogus": must be auto/);
    assert.doesNotMatch(result.stdout, /running at|embedded Redis|building/i, "nothing was started");
  });
}
