/**
 * Data a page may act on (helper-168: with the web server hung, a healthy claim was shown
 * "Stale — no refresh for 33 s" with Force release enabled).
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { knownUpTo, notCurrentText, pageFreshness } from "../../lib/ui/freshness";

test("live and Redis answering: current, however old the last read", () => {
  assert.deepEqual(pageFreshness({ live: true, redisDown: false, readAt: 0, now: 600_000 }), { current: true });
});

test("stream down: current while the polls answer, not once the last read is older than 5 s", () => {
  assert.deepEqual(pageFreshness({ live: false, redisDown: false, readAt: 100_000, now: 104_000 }), { current: true });
  const stale = pageFreshness({ live: false, redisDown: false, readAt: 100_000, now: 133_400 });
  assert.deepEqual(stale, { current: false, readAt: 100_000, cause: "connection" });
  assert.equal(
    notCurrentText(stale as Exclude<typeof stale, { current: true }>, 133_400),
    "not refreshed for 33 s: the dashboard lost its connection",
  );
});

test("Redis unreachable: never current (its claims' TTLs cannot be known), and the page says why", () => {
  const down = pageFreshness({ live: false, redisDown: true, readAt: 100_000, now: 100_500 });
  assert.deepEqual(down, { current: false, readAt: 100_000, cause: "redis" });
  assert.match(
    notCurrentText(down as Exclude<typeof down, { current: true }>, 112_000),
    /^not refreshed for 12 s: Redis/,
  );
});

test("what counting may rely on: while live, up to the stream's last word; else the last read", () => {
  assert.equal(knownUpTo({ live: true, heardAt: 50_000, readAt: 40_000 }), 50_000);
  assert.equal(knownUpTo({ live: true, heardAt: 30_000, readAt: 40_000 }), 40_000);
  assert.equal(knownUpTo({ live: false, heardAt: 50_000, readAt: 40_000 }), 40_000);
});
