/**
 * The health report's operational checks (stale claims, missed ticks, changed builds, held-up
 * workers): checks that do not answer in time, or fail, are a problem in the report, never a
 * clean bill; and an anonymous probe is answered with the last complete checks only while they
 * are at most ANONYMOUS_CHECKS_MAX_AGE_MS old.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import {
  ANONYMOUS_CHECKS_MAX_AGE_MS,
  ANONYMOUS_CHECKS_REUSED_MS,
  answeredWithin,
  OPERATIONAL_CHECKS_LATE,
  reusedChecks,
  type Operational,
} from "../../lib/web/health-report";

const never = <T>() => new Promise<T>(() => {});

test("checks that answer in time are the report's problems", async () => {
  const result = await answeredWithin(Promise.resolve(["claim tiles is stale"]), Promise.resolve(2), 1_000);
  assert.deepEqual(result, { problems: ["claim tiles is stale"], alertsFiring: 2, complete: true });
});

test("checks that do not answer within the deadline are a problem, not an empty list", async () => {
  const result = await answeredWithin(never<string[]>(), Promise.resolve(0), 50);
  assert.deepEqual(result.problems, [OPERATIONAL_CHECKS_LATE]);
  assert.equal(result.complete, false);
  assert.equal(result.alertsFiring, 0);
});

test("checks that fail say so, with the error", async () => {
  const result = await answeredWithin(Promise.reject(new Error("READONLY replica")), Promise.resolve(0), 1_000);
  assert.equal(result.problems.length, 1);
  assert.match(result.problems[0]!, /checks for stale claims.* failed: READONLY replica/);
  assert.equal(result.complete, false);
});

test("a firing-alerts count that does not answer leaves the problems and marks the checks incomplete", async () => {
  const result = await answeredWithin(Promise.resolve([]), never<number>(), 50);
  assert.deepEqual(result, { problems: [], alertsFiring: undefined, complete: false });
});

test("anonymous probes reuse the last complete checks while they are young, then wait for the run under way", async () => {
  let now = 0;
  const runs: ((result: Operational) => void)[] = [];
  const probe = reusedChecks(
    () => new Promise<Operational>((resolve) => runs.push(resolve)),
    () => now,
  );
  const complete = (problems: string[]): Operational => ({ problems, alertsFiring: 0, complete: true });
  const late: Operational = { problems: [OPERATIONAL_CHECKS_LATE], alertsFiring: 0, complete: false };

  // The first probe waits for its own run.
  const first = probe(undefined);
  assert.equal(runs.length, 1);
  runs[0]!(complete(["a"]));
  assert.deepEqual((await first).problems, ["a"]);

  // Within ANONYMOUS_CHECKS_REUSED_MS: the same result, no new run.
  now += ANONYMOUS_CHECKS_REUSED_MS - 1;
  assert.deepEqual((await probe(undefined)).problems, ["a"]);
  assert.equal(runs.length, 1);

  // Due: a new run starts in the background; the probe still gets the last complete result.
  now += 1;
  assert.deepEqual((await probe(undefined)).problems, ["a"]);
  assert.equal(runs.length, 2);
  runs[1]!(complete(["b"]));
  await Promise.resolve();
  now += 1;
  assert.deepEqual((await probe(undefined)).problems, ["b"]);

  // The checks keep timing out: the last complete result is reused only until it is
  // ANONYMOUS_CHECKS_MAX_AGE_MS old; then a probe waits for the run under way and gets its report.
  const bAt = now - 1;
  while (now - bAt < ANONYMOUS_CHECKS_MAX_AGE_MS - ANONYMOUS_CHECKS_REUSED_MS) {
    now += ANONYMOUS_CHECKS_REUSED_MS;
    assert.deepEqual((await probe(undefined)).problems, ["b"], `at ${now - bAt} ms`);
    runs.at(-1)!(late);
    await Promise.resolve();
  }
  now = bAt + ANONYMOUS_CHECKS_MAX_AGE_MS;
  const stale = probe(undefined);
  runs.at(-1)!(late);
  assert.deepEqual((await stale).problems, [OPERATIONAL_CHECKS_LATE]);
});
