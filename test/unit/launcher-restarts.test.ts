/**
 * When `npm start` starts a child again that exited on its own, and when it gives up (a crash
 * loop): lib/launcher/restarts.ts. The launcher test (test/launcher/start-stop.test.ts) kills the
 * real children.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { describeExit, RESTART_POLICY, RestartBudget } from "../../lib/launcher/restarts";

test("restarts after 1 s, then a doubling delay, and gives up on the fifth exit within two minutes", () => {
  const budget = new RestartBudget();
  const decisions = [0, 1_000, 3_000, 7_000, 15_000].map((at) => budget.exited(at));
  assert.deepEqual(decisions.slice(0, 4), [
    { restart: true, delayMs: 1_000, restartNumber: 1 },
    { restart: true, delayMs: 2_000, restartNumber: 2 },
    { restart: true, delayMs: 4_000, restartNumber: 3 },
    { restart: true, delayMs: 8_000, restartNumber: 4 },
  ]);
  assert.deepEqual(decisions[4], { restart: false, exits: 5, windowMs: RESTART_POLICY.windowMs });
});

test("exits older than the window are forgotten: a child that stayed up starts again from the first delay", () => {
  const budget = new RestartBudget();
  for (const at of [0, 1_000, 3_000, 7_000]) assert.equal(budget.exited(at).restart, true);
  assert.deepEqual(budget.exited(7_000 + RESTART_POLICY.windowMs), { restart: true, delayMs: 1_000, restartNumber: 1 });
});

test("the delay stops growing at the policy's maximum", () => {
  const budget = new RestartBudget({ firstDelayMs: 1_000, maxDelayMs: 3_000, maxExits: 10, windowMs: 60_000 });
  const delays = [0, 1, 2, 3, 4].map((at) => budget.exited(at)).map((d) => (d.restart ? d.delayMs : -1));
  assert.deepEqual(delays, [1_000, 2_000, 3_000, 3_000, 3_000]);
});

test("an exit is described by its signal or its code", () => {
  assert.equal(describeExit({ code: null, signal: "SIGKILL" }), "was killed by SIGKILL");
  assert.equal(describeExit({ code: 1, signal: null }), "exited with code 1");
  assert.equal(describeExit({ code: 0, signal: null }), "exited with code 0");
  assert.equal(describeExit({ code: null, signal: null }), "could not be started");
});
