/**
 * What an attempt's failure means for its record and its job (lib/rebuilds/classify-failure.ts):
 * a worker that stalled is not the job's failure, a shutdown hands the job back, a declared
 * transient failure is retried, a bad exit code is not.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { classifyFailure } from "../../lib/rebuilds/classify-failure";
import {
  LOCK_LOST_ABORT_REASON,
  StepFailedError,
  TransientStepError,
  WorkerStalledError,
} from "../../lib/rebuilds/steps/context";

const live = { jobSignal: new AbortController().signal, timeLimitMs: 60_000 };

test("a worker stall (the step warden's kill) hands the job back without spending an attempt", () => {
  const failure = classifyFailure(new WorkerStalledError("step s was killed by the step warden: …"), live);
  assert.equal(failure.kind, "hand-back");
  assert.match(failure.kind === "hand-back" ? failure.reason : "", /step warden.*handed back/);
});

test("a stall that also lost the job lock: BullMQ redelivers the job (as for any lost lock), and the reason names the stall", () => {
  const controller = new AbortController();
  controller.abort(LOCK_LOST_ABORT_REASON);
  const jobSignal = controller.signal;
  const stalled = classifyFailure(
    new WorkerStalledError("step s was killed by the step warden: the worker did not run for 5012 ms"),
    {
      ...live,
      jobSignal,
    },
  );
  assert.ok(stalled.kind === "fail" && stalled.retry && stalled.status === "aborted", JSON.stringify(stalled));
  assert.equal(
    stalled.reason,
    "step s was killed by the step warden: the worker did not run for 5012 ms; its BullMQ job lock ran out meanwhile: the job is redelivered",
  );
  const lost = classifyFailure(new Error("aborted"), { ...live, jobSignal });
  assert.ok(lost.kind === "fail" && /^BullMQ job lock lost/.test(lost.reason), JSON.stringify(lost));
});

test("a shutdown hands the job back", () => {
  const controller = new AbortController();
  controller.abort("shutdown");
  assert.equal(classifyFailure(new Error("aborted"), { ...live, jobSignal: controller.signal }).kind, "hand-back");
});

test("a declared transient step failure is retried; a bad exit code is not", () => {
  const transient = classifyFailure(new TransientStepError("step s exited 75 (declared transient)"), live);
  assert.ok(transient.kind === "fail" && transient.retry && transient.status === "failed");
  const permanent = classifyFailure(new StepFailedError("step s exited 2"), live);
  assert.ok(permanent.kind === "fail" && !permanent.retry);
});

test("the worker's own writes refused by a full, failing or read-only disk are retried (ENOSPC, EIO, EROFS); a missing directory is not", () => {
  const errno = (code: string) => Object.assign(new Error(`${code}: mkdir '/out/.work/x'`), { code });
  for (const code of ["ENOSPC", "EDQUOT", "EIO", "EROFS"]) {
    const failure = classifyFailure(errno(code), live);
    assert.ok(failure.kind === "fail" && failure.retry, `${code}: ${JSON.stringify(failure)}`);
  }
  const missing = classifyFailure(errno("ENOENT"), live);
  assert.ok(missing.kind === "fail" && !missing.retry);
});
