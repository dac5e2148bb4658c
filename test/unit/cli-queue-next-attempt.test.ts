/**
 * The CLI queue's NEXT ATTEMPT column: a time ahead says "in …"; one passed while the job still
 * waits says how long it is overdue (no worker picked it up), not "in 0 s" (black-box helper-109).
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { nextAttempt } from "../../cli/commands/queue";

const at = Date.UTC(2026, 11, 6, 13, 9, 20);

test("a next attempt ahead says in how long; one passed says how long overdue; none is a dash", () => {
  assert.match(nextAttempt({ nextAttemptAt: at }, at - 90_000), /^2026-12-06 13:09:20 UTC \(in 1 min 30 s\)$/);
  assert.match(nextAttempt({ nextAttemptAt: at }, at + 57_000), /^2026-12-06 13:09:20 UTC \(overdue by 57 s\)$/);
  // Within a second of it: BullMQ moves it at about that moment.
  assert.match(nextAttempt({ nextAttemptAt: at }, at + 500), /\(in 0 s\)$/);
  assert.equal(nextAttempt({ nextAttemptAt: null }, at), "–");
});
