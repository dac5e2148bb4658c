/** The one decision of what a run does now (lib/rebuilds/decide.ts), rule by rule. */
import assert from "node:assert/strict";
import { test } from "node:test";
import { decideRun, DEFER_MAX_MS, DEFER_MIN_MS, type RunSituation } from "../../lib/rebuilds/decide";

const holder = (over: Partial<NonNullable<RunSituation["claim"]>["holder"]> = {}) => ({
  version: "v2",
  jobId: "job-b",
  workerId: "w-1",
  host: "h",
  revokedAt: null,
  ...over,
});

test("already rebuilt skips unless forced; a free output builds", () => {
  const base = { version: "v1", force: false, rebuiltBy: "run-x-a1", claim: null };
  assert.deepEqual(decideRun(base), { action: "skip", reason: "already-rebuilt", rebuiltBy: "run-x-a1" });
  assert.deepEqual(decideRun({ ...base, force: true }), { action: "build" });
});

test("the same job's earlier attempt is taken over; the same version held is a skip; another version defers", () => {
  const claim = { holder: holder(), pttlMs: 4_000 };
  assert.equal(decideRun({ version: "v1", force: false, rebuiltBy: null, claim, jobId: "job-b" }).action, "take-over");
  assert.deepEqual(decideRun({ version: "v2", force: false, rebuiltBy: null, claim, jobId: "job-c" }), {
    action: "skip",
    reason: "claim-held",
    heldBy: "w-1",
    pttlMs: 4_000,
  });
  const deferred = decideRun({ version: "v1", force: false, rebuiltBy: null, claim, jobId: "job-c" });
  assert.deepEqual(deferred, { action: "defer", heldBy: "w-1", heldVersion: "v2", pttlMs: 4_000, waitMs: 4_100 });
});

test("the wait is the holder's TTL within bounds", () => {
  const wait = (pttlMs: number) => {
    const d = decideRun({ version: "v1", force: false, rebuiltBy: null, claim: { holder: holder(), pttlMs } });
    return d.action === "defer" ? d.waitMs : NaN;
  };
  assert.equal(wait(0), DEFER_MIN_MS);
  assert.equal(wait(10 * DEFER_MAX_MS), DEFER_MAX_MS);
});

test("a force-released holder still stopping is waited for by everyone: never a takeover, never a claim-held skip", () => {
  const claim = { holder: holder({ revokedAt: 1_000 }), pttlMs: 6_000 };
  for (const situation of [
    { version: "v1", jobId: "job-b" }, // its own job's next attempt
    { version: "v2", jobId: "job-c" }, // the same version: the revoked holder will not publish it
    { version: "v3", jobId: "job-d" },
  ]) {
    const decision = decideRun({ ...situation, force: false, rebuiltBy: null, claim });
    assert.equal(decision.action, "defer", JSON.stringify(situation));
    assert.equal(decision.action === "defer" && decision.releasing, true);
    assert.equal(decision.action === "defer" && decision.waitMs, 6_100);
  }
});

test("takeovers go one way: an earlier attempt never takes the claim from a later one of its job", () => {
  const at = (attempt: number | null) => ({ holder: holder({ attempt }), pttlMs: 4_000 });
  const decide = (claim: ReturnType<typeof at>, attempt?: number) =>
    decideRun({ version: "v1", force: false, rebuiltBy: null, claim, jobId: "job-b", ...(attempt ? { attempt } : {}) });
  assert.equal(decide(at(2), 3).action, "take-over");
  assert.equal(decide(at(3), 3).action, "take-over"); // the same attempt again (its first reply lost)
  assert.deepEqual(decide(at(3), 2), { action: "superseded", heldBy: "w-1" });
  // No order known on either side: as before, the deciding attempt takes over.
  assert.equal(decide(at(null), 2).action, "take-over");
  assert.equal(decide(at(3)).action, "take-over");
  // Another job's later attempt number means nothing.
  assert.equal(
    decideRun({ version: "v1", force: false, rebuiltBy: null, claim: at(9), jobId: "job-c", attempt: 1 }).action,
    "defer",
  );
});

test("a same-version holder whose job is being cancelled carries no request: wait for it, do not skip (black-box helper-174)", () => {
  const claim = { holder: holder(), pttlMs: 4_000, cancelling: true };
  assert.deepEqual(decideRun({ version: "v2", force: false, rebuiltBy: null, claim, jobId: "job-c" }), {
    action: "defer",
    heldBy: "w-1",
    heldVersion: "v2",
    pttlMs: 4_000,
    waitMs: 4_100,
    cancelling: true,
  });
  // Forced, too: force skips the idempotency check, never the claim.
  assert.equal(decideRun({ version: "v2", force: true, rebuiltBy: null, claim, jobId: "job-c" }).action, "defer");
  // Another version's holder being cancelled: the deferral it always was.
  const other = decideRun({ version: "v1", force: false, rebuiltBy: null, claim, jobId: "job-c" });
  assert.equal(other.action, "defer");
});
