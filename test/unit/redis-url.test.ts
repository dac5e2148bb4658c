import assert from "node:assert/strict";
import { test } from "node:test";
import { deriveClaimsRedisUrl, parseConfig } from "../../lib/config";
import {
  connectionOptionsOf,
  describeRedisTarget,
  parseRedisUrl,
  redactRedisUrl,
  redisTargetOf,
  withDatabase,
} from "../../lib/redis/url";

test("redis:// and rediss:// stay whole for ioredis, which parses user, password, db and TLS", () => {
  assert.deepEqual(redisTargetOf("redis://claimwatch:s3cret@h:6380/2"), {
    kind: "direct",
    url: "redis://claimwatch:s3cret@h:6380/2",
    tls: false,
    db: 2,
  });
  const tls = redisTargetOf("rediss://h:6380");
  assert.equal(tls.kind === "direct" && tls.tls, true);
  assert.deepEqual(connectionOptionsOf(tls), { url: "rediss://h:6380", options: {} });
});

test("a Sentinel URL becomes sentinels, the master name, db and credentials", () => {
  const target = redisTargetOf(
    "redis+sentinel://app:p%40ss@s1.internal:26380,10.0.0.2,[::1]:26381/cw-main/3?sentinelPassword=sp&sentinelUsername=su",
  );
  assert.deepEqual(target, {
    kind: "sentinel",
    sentinels: [
      { host: "s1.internal", port: 26380 },
      { host: "10.0.0.2", port: 26379 },
      { host: "::1", port: 26381 },
    ],
    name: "cw-main",
    db: 3,
    username: "app",
    password: "p@ss",
    sentinelUsername: "su",
    sentinelPassword: "sp",
  });
  const { url, options } = connectionOptionsOf(target);
  assert.equal(url, undefined);
  assert.equal(options.name, "cw-main");
  assert.equal(options.db, 3);
  assert.deepEqual(options.sentinels, target.kind === "sentinel" ? target.sentinels : null);
  assert.equal(options.password, "p@ss");
  assert.equal(options.sentinelPassword, "sp");
  assert.equal(options.failoverDetector, undefined, "ioredis 6 ends a client whose detector fires mid-reconnect");
  assert.equal(options.reconnectOnError?.(new Error("READONLY You can't write against a read only replica.")), 2);
  // A primary that lost its replicas (min-replicas-to-write), after a failover the old one: re-ask
  // the sentinels, and fail the command (it did not run) rather than resend it in a loop.
  assert.equal(options.reconnectOnError?.(new Error("NOREPLICAS Not enough good replicas to write.")), 1);
  assert.equal(
    options.reconnectOnError?.(new Error("NOREPLICAS Not enough good replicas to write.")),
    false,
    "not again at once: one reconnect per NOREPLICAS_RECONNECT_MS, not one per write",
  );
  // Per client: ioredis calls the hook on each instance's own options (a duplicate() has its own).
  const other = {};
  assert.equal(options.reconnectOnError?.call(other, new Error("NOREPLICAS Not enough good replicas to write.")), 1);
  assert.equal(
    options.reconnectOnError?.call(other, new Error("NOREPLICAS Not enough good replicas to write.")),
    false,
  );
  assert.equal(options.reconnectOnError?.(new Error("ERR other")), false);

  const bare = redisTargetOf("redis+sentinel://127.0.0.1:26379/mymaster");
  assert.deepEqual(bare, {
    kind: "sentinel",
    sentinels: [{ host: "127.0.0.1", port: 26379 }],
    name: "mymaster",
    db: 0,
  });
  const defaultUser = redisTargetOf("redis+sentinel://:pw@h/m");
  assert.equal(defaultUser.kind === "sentinel" && defaultUser.password, "pw");
  assert.equal(defaultUser.kind === "sentinel" && defaultUser.username, undefined);
});

for (const [bad, problem] of [
  ["redis+sentinel://h:26379", /redis\+sentinel:\/\/\[user:password@\]host:port/],
  ["redis+sentinel://h:26379/", /master name/],
  ["redis+sentinel://h:26379/m/16", /database after the master name/],
  ["redis+sentinel://h:99999/m", /sentinel address "h:99999"/],
  ["redis+sentinel://h:1,,h:2/m", /sentinel address ""/],
  ["redis+sentinel://h/m?role=slave", /unknown parameter "role"/],
  ["rediss+sentinel://h/m", /TLS to a Sentinel group is not supported/],
  ["redis://h:6379/16", /database in the path/],
  ["redis://cw:50%off@h:6379/0", /not valid percent-encoding \(write % as %25\)/],
  ["rediss://c%wuser:pw@h:6379", /not valid percent-encoding/],
  ["sentinel://h/m", /must be a URL like/],
] as const) {
  test(`${bad} is refused with the reason`, () => {
    const parsed = parseRedisUrl(bad);
    assert.equal(parsed.ok, false);
    assert.match(parsed.ok ? "" : parsed.problem, problem);
  });
}

test("config: a Sentinel URL is accepted; a bad one is one line naming the variable, password hidden", () => {
  const ok = parseConfig({ REDIS_URL: "redis+sentinel://a:26379,b:26379/cw" }, "/x");
  assert.ok(ok.ok);
  const bad = parseConfig({ CLAIMS_REDIS_URL: "redis+sentinel://u:topsecret@a:26379/cw/99" }, "/x");
  assert.equal(bad.ok, false);
  const message = bad.ok ? "" : bad.error.message;
  assert.match(message, /^CLAIMS_REDIS_URL: database after the master name/);
  assert.ok(!message.includes("topsecret") && message.includes("u:***@"), message);
  assert.ok(!message.includes("\n"));
});

test("claims default to DB 1 of the same Sentinel group; query and credentials kept", () => {
  assert.equal(
    deriveClaimsRedisUrl("redis+sentinel://u:p@a:1,b:2/cw?sentinelPassword=x", undefined),
    "redis+sentinel://u:p@a:1,b:2/cw/1?sentinelPassword=x",
  );
  assert.equal(withDatabase("redis+sentinel://a:1/cw/0", 1), "redis+sentinel://a:1/cw/1");
  assert.equal(withDatabase("rediss://u:p@h:6380/0", 1), "rediss://u:p@h:6380/1");
});

test("shown and logged forms hide passwords, keep the user and the place", () => {
  assert.equal(redactRedisUrl("redis://app:pw@h:1/0"), "redis://app:***@h:1/0");
  assert.equal(redactRedisUrl("redis://:pw@h:1/0"), "redis://:***@h:1/0");
  assert.equal(
    redactRedisUrl("redis+sentinel://a:1/cw?sentinelUsername=s&sentinelPassword=pw"),
    "redis+sentinel://a:1/cw?sentinelUsername=s&sentinelPassword=***",
  );
  assert.equal(describeRedisTarget("redis://app:pw@h:6380/0"), "h:6380");
  assert.equal(describeRedisTarget("redis+sentinel://u:p@a:1,[::1]:2/cw/1"), "sentinel group cw via a:1,[::1]:2");
});
