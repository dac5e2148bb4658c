import assert from "node:assert/strict";
import { test } from "node:test";
import {
  assertClaimTiming,
  ClaimLostError,
  newClaimToken,
  staleReasons,
  type ClaimHolder,
} from "../../lib/claims/index";
import { staleNow } from "../../lib/claims/stale";

test("a token is host:pid:random and unique per grant", () => {
  const token = newClaimToken();
  const parts = token.split(":");
  assert.equal(parts.length, 3);
  assert.match(parts[0]!, /^[A-Za-z0-9_.-]+$/);
  assert.equal(parts[1], String(process.pid));
  assert.match(parts[2]!, /^[0-9a-f]{32}$/);
  const many = new Set(Array.from({ length: 1_000 }, () => newClaimToken()));
  assert.equal(many.size, 1_000);
});

test("the refresh cadence must leave two refreshes per TTL", () => {
  assert.doesNotThrow(() => assertClaimTiming({ ttlMs: 1_000, refreshEveryMs: 500 }));
  assert.throws(() => assertClaimTiming({ ttlMs: 1_000, refreshEveryMs: 501 }), /at most ttlMs \/ 2/);
  assert.throws(() => assertClaimTiming({ ttlMs: 0, refreshEveryMs: 1 }), /ttlMs must be a positive/);
  assert.throws(() => assertClaimTiming({ ttlMs: 1.5, refreshEveryMs: 1 }), /ttlMs must be a positive/);
  assert.throws(() => assertClaimTiming({ ttlMs: 1_000, refreshEveryMs: 0 }), /refreshEveryMs must be a positive/);
});

test("ClaimLostError names the claim, the fence and the cause", () => {
  const error = new ClaimLostError("output:x", "deadline", 7);
  assert.equal(error.name, "ClaimLostError");
  assert.equal(error.cause, "deadline");
  assert.equal(error.fence, 7);
  assert.match(error.message, /lost claim output:x \(fence 7\): no refresh succeeded within the TTL/);
});

const holder: ClaimHolder = {
  host: "h",
  pid: 1,
  workerId: "w1",
  jobId: "j",
  attempt: null,
  runId: null,
  rebuild: null,
  tenant: null,
  version: null,
  fence: 1,
  ttlMs: 3_000,
  refreshEveryMs: 1_000,
  acquiredAt: 10_000,
  refreshedAt: 10_000,
  stopWithinMs: null,
  revokedBy: null,
  revokedAt: null,
};

test("stale: last refresh older than two intervals, or holder without a live heartbeat", () => {
  assert.deepEqual(staleReasons(holder, 12_000, new Set(["w1"])), []);
  assert.deepEqual(staleReasons(holder, 12_001, new Set(["w1"])), [
    { kind: "refresh-overdue", sinceRefreshMs: 2_001, refreshEveryMs: 1_000 },
  ]);
  assert.deepEqual(staleReasons(holder, 10_500, new Set(["w2"])), [{ kind: "holder-not-live", workerId: "w1" }]);
  // Without the live set (claims Redis elsewhere) the heartbeat check is skipped.
  assert.deepEqual(staleReasons(holder, 10_500, undefined), []);
  // A holder that is no worker (e.g. a CLI run) is judged by its refreshes only.
  assert.deepEqual(staleReasons({ ...holder, workerId: null }, 10_500, new Set()), []);
});

test("staleNow: a page counts the overdue refresh up between reads, keeps the holder's missing heartbeat, and falls back to the server's reason", () => {
  const read = {
    stale: true,
    staleReason: "no refresh for 9 s (refreshes every 1 s); holder w1 has no live heartbeat",
    holderNotLive: true,
    refreshedAt: 1_000,
    refreshEveryMs: 1_000,
    holder: { workerId: "w1" },
  };
  assert.deepEqual(staleNow(read, 10_000), { stale: true, reason: read.staleReason });
  assert.deepEqual(staleNow(read, 31_000), {
    stale: true,
    reason: "no refresh for 30 s (refreshes every 1 s); holder w1 has no live heartbeat",
  });
  // Fresh when read, overdue since: stale here too, before the next read says so.
  const fresh = { ...read, stale: false, staleReason: null, holderNotLive: false };
  assert.deepEqual(staleNow(fresh, 2_500), { stale: false, reason: null });
  assert.deepEqual(staleNow(fresh, 3_500), { stale: true, reason: "no refresh for 3 s (refreshes every 1 s)" });
  // Nothing to count from: the server's word.
  const unknown = { ...read, refreshedAt: null, holderNotLive: false, staleReason: "as the server said" };
  assert.deepEqual(staleNow(unknown, 99_000), { stale: true, reason: "as the server said" });
});
