/**
 * The page's health banner holds the report whose probes were sent last: a fetch sent while
 * Redis hung answers after the live event that said it is back, and must not undo it (the e2e
 * health spec saw a banner stuck on "Command timed out" that way, with the server saying ok).
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import type { HealthReport } from "../../lib/health/health";
import { newerHealth } from "../../lib/ui/queries";

const down = (checkedAt?: number): HealthReport => ({
  ok: false,
  redis: { ok: false, error: "Command timed out" },
  claimsRedis: { ok: false, error: "Command timed out" },
  workers: null,
  problems: ["Redis is unreachable: Command timed out"],
  ...(checkedAt === undefined ? {} : { checkedAt }),
});
const up = (checkedAt?: number): HealthReport => ({ ...down(checkedAt), ok: true, problems: [] });

test("an older report arriving after a newer one is ignored", () => {
  const held = up(2_000);
  assert.equal(newerHealth(held, down(1_000)), held);
});

test("a newer report replaces the one held, whichever way it came", () => {
  const arriving = up(3_000);
  assert.equal(newerHealth(down(1_000), arriving), arriving);
  assert.equal(newerHealth(undefined, arriving), arriving);
});

test("a report without a probe time (an older server) is taken as it comes", () => {
  const arriving = down();
  assert.equal(newerHealth(up(5_000), arriving), arriving);
  const fresh = up(1);
  assert.equal(newerHealth(down(), fresh), fresh);
});
