import assert from "node:assert/strict";
import { test } from "node:test";
import { deriveClaimsRedisUrl, parseConfig } from "../../lib/config";

function errorOf(env: Record<string, string>) {
  const result = parseConfig(env, "/srv/claimwatch");
  assert.equal(result.ok, false, `expected ${JSON.stringify(env)} to be rejected`);
  return result.ok ? undefined : result.error;
}

test("defaults: loopback, port 3000, embedded Redis, files relative to the working directory", () => {
  const result = parseConfig({}, "/srv/claimwatch");
  assert.ok(result.ok);
  assert.deepEqual(result.config, {
    redisUrl: undefined,
    claimsRedisUrl: undefined,
    host: "127.0.0.1",
    port: 3000,
    definitionsPath: "/srv/claimwatch/claimwatch.yaml",
    definitionsSource: { from: "default", cwd: "/srv/claimwatch" },
    dataDir: "/srv/claimwatch/.data",
    keyPrefix: "claimwatch",
    workerConcurrency: 4,
    inputsVisibleAfterMs: undefined,
    upkeepSlowMs: 30_000,
    triggerReplicas: 0,
    operatorTokens: [],
    viewerTokens: [],
    publicOrigin: undefined,
    metricsToken: undefined,
  });
});

test("CLAIMWATCH_METRICS_TOKEN: not a login token too (a token has one role), named without the token", () => {
  const token = "shared-token-0123456789";
  for (const variable of ["CLAIMWATCH_OPERATOR_TOKEN", "CLAIMWATCH_VIEWER_TOKEN"]) {
    const result = parseConfig({ [variable]: `alice:${token}`, CLAIMWATCH_METRICS_TOKEN: token }, "/srv");
    assert.ok(!result.ok, variable);
    assert.equal(
      result.error.message,
      `CLAIMWATCH_METRICS_TOKEN: is the token of ${variable} entry 'alice'; a token has one role: give /metrics its own`,
    );
  }
});

test("CLAIMWATCH_METRICS_TOKEN: a 16+ character token, never echoed in the error", () => {
  const good = parseConfig({ CLAIMWATCH_METRICS_TOKEN: "metrics-token-0123456789" }, "/srv");
  assert.ok(good.ok && good.config.metricsToken === "metrics-token-0123456789");
  const bad = parseConfig({ CLAIMWATCH_METRICS_TOKEN: "short secret" }, "/srv");
  assert.ok(!bad.ok);
  assert.match(bad.error.message, /^CLAIMWATCH_METRICS_TOKEN: must be 16-256 characters/);
  assert.ok(!bad.error.message.includes("short secret"));
});

for (const bad of ["abc", "0", "65536", "-1", "3000.5", "80 80"]) {
  test(`PORT=${JSON.stringify(bad)} is rejected, naming PORT and the value`, () => {
    const error = errorOf({ PORT: bad });
    assert.equal(error?.variable, "PORT");
    assert.match(error!.message, /^PORT: must be a whole number from 1 to 65535/);
    assert.ok(error!.message.includes(JSON.stringify(bad)), error!.message);
    assert.ok(!error!.message.includes("\n"), "one line");
  });
}

for (const bad of ["localhost:6379", "http://127.0.0.1:6379", "redis://", "not a url", "redis://h:6379/99"]) {
  test(`REDIS_URL=${JSON.stringify(bad)} is rejected, naming REDIS_URL`, () => {
    const error = errorOf({ REDIS_URL: bad });
    assert.equal(error?.variable, "REDIS_URL");
    assert.match(error!.message, /^REDIS_URL: /);
  });
}

test("CLAIMS_REDIS_URL is validated like REDIS_URL", () => {
  assert.equal(errorOf({ CLAIMS_REDIS_URL: "tcp://x" })?.variable, "CLAIMS_REDIS_URL");
});

test("a key prefix that could break the hash tag is rejected", () => {
  assert.equal(errorOf({ CLAIMWATCH_KEY_PREFIX: "a}b" })?.variable, "CLAIMWATCH_KEY_PREFIX");
});

test("CLAIMWATCH_WORKER_CONCURRENCY must be 1-256", () => {
  assert.equal(errorOf({ CLAIMWATCH_WORKER_CONCURRENCY: "0" })?.variable, "CLAIMWATCH_WORKER_CONCURRENCY");
  assert.equal(errorOf({ CLAIMWATCH_WORKER_CONCURRENCY: "many" })?.variable, "CLAIMWATCH_WORKER_CONCURRENCY");
});

test("CLAIMWATCH_TRIGGER_REPLICAS: a whole number of replicas 0-15, 0 when unset", () => {
  for (const bad of ["-1", "1.5", "two", "16"]) {
    const error = errorOf({ CLAIMWATCH_TRIGGER_REPLICAS: bad });
    assert.equal(error?.variable, "CLAIMWATCH_TRIGGER_REPLICAS", bad);
    assert.match(error!.message, /whole number of replicas from 0 to 15/);
  }
  const parsed = parseConfig({ CLAIMWATCH_TRIGGER_REPLICAS: "2" }, "/tmp");
  assert.ok(parsed.ok);
  assert.equal(parsed.config.triggerReplicas, 2);
  const unset = parseConfig({}, "/tmp");
  assert.ok(unset.ok);
  assert.equal(unset.config.triggerReplicas, 0);
});

test("CLAIMWATCH_INPUTS_VISIBLE_AFTER_MS: whole milliseconds 0-600000, unset leaves the worker's default", () => {
  for (const bad of ["-1", "1.5", "1s", "600001"]) {
    assert.equal(
      errorOf({ CLAIMWATCH_INPUTS_VISIBLE_AFTER_MS: bad })?.variable,
      "CLAIMWATCH_INPUTS_VISIBLE_AFTER_MS",
      bad,
    );
  }
  const zero = parseConfig({ CLAIMWATCH_INPUTS_VISIBLE_AFTER_MS: "0" }, "/x");
  assert.ok(zero.ok);
  assert.equal(zero.config.inputsVisibleAfterMs, 0);
  const unset = parseConfig({}, "/x");
  assert.ok(unset.ok);
  assert.equal(unset.config.inputsVisibleAfterMs, undefined);
});

test("CLAIMWATCH_UPKEEP_SLOW_MS: whole milliseconds 1000-3600000, 30 s when unset", () => {
  for (const bad of ["0", "999", "1.5", "30s", "3600001", "-5"]) {
    assert.equal(
      errorOf({ CLAIMWATCH_UPKEEP_SLOW_MS: bad })?.variable,
      "CLAIMWATCH_UPKEEP_SLOW_MS",
      JSON.stringify(bad),
    );
  }
  const set = parseConfig({ CLAIMWATCH_UPKEEP_SLOW_MS: " 5000 " }, "/x");
  assert.ok(set.ok);
  assert.equal(set.config.upkeepSlowMs, 5_000);
  const unset = parseConfig({}, "/x");
  assert.ok(unset.ok);
  assert.equal(unset.config.upkeepSlowMs, 30_000);
});

test("tokens: comma-separated, optional name, never echoed in errors", () => {
  const result = parseConfig(
    {
      CLAIMWATCH_OPERATOR_TOKEN: "alice:aaaaaaaaaaaaaaaa1, bbbbbbbbbbbbbbbb2",
      CLAIMWATCH_VIEWER_TOKEN: "vic:cccccccccccccccc3",
    },
    "/x",
  );
  assert.ok(result.ok);
  assert.deepEqual(result.config.operatorTokens, [
    { name: "alice", token: "aaaaaaaaaaaaaaaa1" },
    { name: "operator-2", token: "bbbbbbbbbbbbbbbb2" },
  ]);
  assert.deepEqual(result.config.viewerTokens, [{ name: "vic", token: "cccccccccccccccc3" }]);
  const error = errorOf({ CLAIMWATCH_OPERATOR_TOKEN: "alice:short" });
  assert.equal(error?.variable, "CLAIMWATCH_OPERATOR_TOKEN");
  assert.ok(!error!.message.includes("short"), error!.message);
  // An empty entry is a mistake, not "no tokens" (a lone comma generated an operator token).
  for (const value of [",", "alice:aaaaaaaaaaaaaaaa1,,bob:bbbbbbbbbbbbbbbb2", "alice:aaaaaaaaaaaaaaaa1,"]) {
    const empty = errorOf({ CLAIMWATCH_OPERATOR_TOKEN: value });
    assert.equal(empty?.variable, "CLAIMWATCH_OPERATOR_TOKEN", value);
    assert.match(empty!.message, /^CLAIMWATCH_OPERATOR_TOKEN: entry \d is empty \(a comma too many\?\)/, value);
  }
});

test("a token name used twice is refused, naming the variable and the name (the audit log could not tell them apart)", () => {
  const a = "aaaaaaaaaaaaaaaa1";
  const b = "bbbbbbbbbbbbbbbb2";
  const c = "cccccccccccccccc3";
  const cases: [Record<string, string>, string, RegExp][] = [
    [
      { CLAIMWATCH_OPERATOR_TOKEN: `alice:${a},alice:${b}` },
      "CLAIMWATCH_OPERATOR_TOKEN",
      /^entries 1 and 2 are both named 'alice'/,
    ],
    [
      { CLAIMWATCH_VIEWER_TOKEN: `vic:${a}, bob:${b}, vic:${c}` },
      "CLAIMWATCH_VIEWER_TOKEN",
      /^entries 1 and 3 are both named 'vic'/,
    ],
    // An entry without a name is named <role>-<position>.
    [
      { CLAIMWATCH_OPERATOR_TOKEN: `operator-2:${a},${b}` },
      "CLAIMWATCH_OPERATOR_TOKEN",
      /^entries 1 and 2 are both named 'operator-2' \(an entry without 'name:' is named operator-<position>\)/,
    ],
    [
      { CLAIMWATCH_OPERATOR_TOKEN: `alice:${a}`, CLAIMWATCH_VIEWER_TOKEN: `alice:${b}` },
      "CLAIMWATCH_VIEWER_TOKEN",
      /^entry 1 is named 'alice', a name CLAIMWATCH_OPERATOR_TOKEN already uses/,
    ],
    // One token twice: the second entry could never log in as itself.
    [
      { CLAIMWATCH_OPERATOR_TOKEN: `alice:${a},bob:${a}` },
      "CLAIMWATCH_OPERATOR_TOKEN",
      /^entry 2 \(bob\) has the same token as entry 1 \(alice\)/,
    ],
    [
      { CLAIMWATCH_OPERATOR_TOKEN: `alice:${a}`, CLAIMWATCH_VIEWER_TOKEN: `vic:${a}` },
      "CLAIMWATCH_VIEWER_TOKEN",
      /^entry 1 \(vic\) has the same token as CLAIMWATCH_OPERATOR_TOKEN entry 1 \(alice\)/,
    ],
  ];
  for (const [env, variable, problem] of cases) {
    const error = errorOf(env);
    assert.equal(error?.variable, variable, JSON.stringify(env));
    assert.match(error!.problem, problem);
    assert.ok(!error!.message.includes("\n"));
    for (const token of [a, b, c]) assert.ok(!error!.message.includes(token), "never echoes a token");
  }
  assert.ok(
    parseConfig({ CLAIMWATCH_OPERATOR_TOKEN: `alice:${a},bob:${b}`, CLAIMWATCH_VIEWER_TOKEN: `${c}` }, "/x").ok,
  );
});

test("binding to a non-loopback HOST without tokens is refused, naming HOST", () => {
  const error = errorOf({ HOST: "0.0.0.0" });
  assert.equal(error?.variable, "HOST");
  assert.match(error!.message, /set CLAIMWATCH_OPERATOR_TOKEN/);
  assert.ok(parseConfig({ HOST: "127.0.0.1" }, "/x").ok);
  assert.ok(parseConfig({ HOST: "::1" }, "/x").ok);
});

test("HOST: an IP address (IPv6 bracketed or not) or a DNS host name; anything else names HOST, also with tokens set", () => {
  const tokens = { CLAIMWATCH_OPERATOR_TOKEN: "alice:aaaaaaaaaaaaaaaaaaaa" };
  for (const good of [
    "127.0.0.1",
    "0.0.0.0",
    "::",
    "::1",
    "[::1]",
    "fe80::1",
    "localhost",
    "claims-1.example.com",
    "1.example.com",
  ]) {
    assert.ok(parseConfig({ HOST: good, ...tokens }, "/x").ok, good);
  }
  for (const bad of [
    "not..a..host",
    "-lead",
    "trail-.example",
    "under_score",
    "host:80",
    "a b",
    "[127.0.0.1",
    "x".repeat(64),
    "999.1.1.1", // not an IP address, and a name's last label is never all digits (helper-130)
    "10.0.0",
  ]) {
    const error = errorOf({ HOST: bad, ...tokens });
    assert.equal(error?.variable, "HOST", bad);
    assert.match(error!.message, /must be a host name or IP address/, bad);
  }
});

test("an empty variable counts as unset", () => {
  const result = parseConfig({ PORT: "", REDIS_URL: "" }, "/x");
  assert.ok(result.ok);
  assert.equal(result.config.port, 3000);
  assert.equal(result.config.redisUrl, undefined);
});

test("good values are parsed", () => {
  const result = parseConfig(
    {
      REDIS_URL: "redis://:secret@cache.internal:6380/2",
      PORT: "8080",
      HOST: "0.0.0.0",
      CLAIMWATCH_DATA_DIR: "/var/lib/cw",
      CLAIMWATCH_OPERATOR_TOKEN: "alice:0123456789abcdefXYZ",
    },
    "/x",
  );
  assert.ok(result.ok);
  assert.equal(result.config.port, 8080);
  assert.equal(result.config.host, "0.0.0.0");
  assert.equal(result.config.dataDir, "/var/lib/cw");
});

test("claims default to logical DB 1 of the main server; an explicit URL wins", () => {
  assert.equal(deriveClaimsRedisUrl("redis://:pw@h:6380/0", undefined), "redis://:pw@h:6380/1");
  assert.equal(deriveClaimsRedisUrl("redis://h:6380", undefined), "redis://h:6380/1");
  assert.equal(deriveClaimsRedisUrl("redis://h:6380", "redis://other:1/4"), "redis://other:1/4");
});

test("CLAIMWATCH_PUBLIC_URL: an http(s) origin, normalised; anything else is refused with the reason", () => {
  for (const [value, origin] of [
    ["https://claims.example.com", "https://claims.example.com"],
    ["https://Claims.Example.com/", "https://claims.example.com"],
    ["http://10.0.0.5:8080", "http://10.0.0.5:8080"],
    ["https://claims.example.com:443", "https://claims.example.com"],
  ] as const) {
    const result = parseConfig({ CLAIMWATCH_PUBLIC_URL: value }, "/x");
    assert.ok(result.ok, value);
    assert.equal(result.config.publicOrigin, origin);
  }
  for (const [value, reason] of [
    ["claims.example.com", /must be a URL like https:\/\/claims\.example\.com/],
    ["ftp://claims.example.com", /http\(s\) URL/],
    ["https://user:pw@claims.example.com", /without user or password/],
    ["https://claims.example.com/dashboard", /origin only/],
    ["https://claims.example.com/?x=1", /origin only/],
  ] as const) {
    const error = errorOf({ CLAIMWATCH_PUBLIC_URL: value });
    assert.equal(error?.variable, "CLAIMWATCH_PUBLIC_URL");
    assert.match(error!.message, reason);
  }
});
