/**
 * `GET /api/health`'s answer: the report as the body (the banner and load balancers read it), and
 * a 503 in the API's error shape beside it, naming the server that does not answer — with why
 * only for a logged-in caller (an anonymous one sees no hosts or messages).
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { healthReply } from "../../lib/api/health";
import type { HealthReport } from "../../lib/health/health";
import type { RedisSafety } from "../../lib/health/redis-safety";

const safe: RedisSafety = {
  ok: true,
  version: "8.0.0",
  evictionPolicy: "noeviction",
  persistence: "aof",
  durability: { level: "durable", detail: "appendfsync always", replicasInSync: 0 },
};
const report = (claimsDown: boolean): HealthReport => ({
  ok: !claimsDown,
  redis: safe,
  claimsRedis: claimsDown ? { ok: false, error: "connect ECONNREFUSED 10.0.0.7:6380" } : safe,
  workers: 2,
  problems: claimsDown ? ["Claims Redis is unreachable: connect ECONNREFUSED 10.0.0.7:6380"] : [],
  checkedAt: 1_000,
});

test("a healthy report is a 200 with the report alone", () => {
  const reply = healthReply(report(false), true);
  assert.equal(reply.status, 200);
  assert.deepEqual(reply.body, report(false));
});

test("a Redis that does not answer is a 503 in the error shape, the report beside it", () => {
  const reply = healthReply(report(true), true);
  assert.equal(reply.status, 503);
  const body = reply.body as HealthReport & { error: { code: string; message: string } };
  assert.deepEqual(body.error, {
    code: "unavailable",
    message: "Claims Redis is unreachable: connect ECONNREFUSED 10.0.0.7:6380",
  });
  assert.equal(body.ok, false);
  assert.deepEqual(body.problems, report(true).problems);
});

test("an anonymous caller's 503 names the server but not the host or the error", () => {
  const body = healthReply(report(true), false).body as HealthReport & { error: { message: string } };
  assert.equal(body.error.message, "Claims Redis is unreachable");
  assert.doesNotMatch(JSON.stringify(body), /10\.0\.0\.7|ECONNREFUSED/);
});

test("an anonymous caller learns each Redis is up, not its version or settings (README: the verdict, no details)", () => {
  const reply = healthReply(report(false), false);
  assert.equal(reply.status, 200);
  assert.deepEqual(reply.body, {
    ok: true,
    redis: { ok: true },
    claimsRedis: { ok: true },
    workers: 2,
    problems: [],
    checkedAt: 1_000,
  });
  assert.doesNotMatch(JSON.stringify(reply.body), /8\.0\.0|noeviction|aof|durable/);
});
