/**
 * Access control against the real web server: every route, called as anonymous, viewer and
 * operator, answers as its table entry says — and a route without an entry fails this test.
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { after, before, test } from "node:test";
import { createTestBed, startWebServer, type TestBed } from "../support/stack";
import { until } from "../support/until";

const TOKENS = {
  operator: "auth-test-operator-0123456789",
  ratey: "auth-test-rate-limited-0123456789",
  viewer: "auth-test-viewer-0123456789",
};
type Caller = "anonymous" | "viewer" | "operator";
type Requirement = "public" | "viewer" | "operator";

/** Every API route: who may call it, a request to make, and the statuses that mean "allowed". */
const ROUTES: Record<string, { role: Requirement; path: string; body?: unknown; allowed: number[]; stream?: boolean }> =
  {
    "GET /api/health": { role: "public", path: "/api/health", allowed: [200] },
    "POST /api/auth/login": { role: "public", path: "/api/auth/login", body: { token: TOKENS.viewer }, allowed: [200] },
    "POST /api/auth/logout": { role: "public", path: "/api/auth/logout", body: {}, allowed: [200] },
    "GET /api/auth/me": { role: "viewer", path: "/api/auth/me", allowed: [200] },
    "GET /api/claims": { role: "viewer", path: "/api/claims", allowed: [200] },
    "GET /api/claims/trail": { role: "viewer", path: "/api/claims/trail?name=output:/srv/none", allowed: [200] },
    "GET /api/claims/ended": { role: "viewer", path: "/api/claims/ended", allowed: [200] },
    // Paths no route serves: 404 in the API's error shape for anyone.
    "GET /api/[...path]": { role: "public", path: "/api/no-such-route", allowed: [404] },
    "POST /api/[...path]": { role: "public", path: "/api/no/such/route", body: {}, allowed: [404] },
    "POST /api/claims/release": {
      role: "operator",
      path: "/api/claims/release",
      body: { name: "output:/srv/none", token: "t", reason: "auth table" },
      allowed: [409],
    },
    "GET /api/rebuilds": { role: "viewer", path: "/api/rebuilds", allowed: [200] },
    "GET /api/rebuilds/[name]/preview": {
      role: "viewer",
      path: "/api/rebuilds/slow/preview?version=v1",
      allowed: [200],
    },
    "POST /api/rebuilds/[name]/runs": {
      role: "operator",
      path: "/api/rebuilds/slow/runs",
      body: { version: "auth" },
      allowed: [202],
    },
    "GET /api/runs": { role: "viewer", path: "/api/runs", allowed: [200] },
    "GET /api/runs/[id]": { role: "viewer", path: "/api/runs/none-a1", allowed: [404] },
    "GET /api/workers": { role: "viewer", path: "/api/workers", allowed: [200] },
    "GET /api/audit": { role: "viewer", path: "/api/audit", allowed: [200] },
    "GET /api/alerts": { role: "viewer", path: "/api/alerts", allowed: [200] },
    "GET /api/runs/timeline": { role: "viewer", path: "/api/runs/timeline?range=24h", allowed: [200] },
    // Server-sent events: the status and headers are checked, the endless body is not read.
    "GET /api/events": { role: "viewer", path: "/api/events", allowed: [200], stream: true },
    // The bed has no `alerts:` section: an operator's test notification is refused (409), audited.
    "POST /api/alerts/test": {
      role: "operator",
      path: "/api/alerts/test",
      body: { receiver: "pager" },
      allowed: [409],
    },
    "GET /api/queue": { role: "viewer", path: "/api/queue", allowed: [200] },
    "GET /api/rebuilds/[name]": { role: "viewer", path: "/api/rebuilds/slow", allowed: [200] },
    // The bed's rebuild has no schedule: refused (400), audited.
    "POST /api/rebuilds/[name]/schedule": {
      role: "operator",
      path: "/api/rebuilds/slow/schedule",
      body: { action: "pause", reason: "auth table" },
      allowed: [400],
    },
    "POST /api/jobs/[id]/cancel": {
      role: "operator",
      path: "/api/jobs/run-none/cancel",
      body: { reason: "auth table" },
      allowed: [404],
    },
    "POST /api/runs/[id]/retry": {
      role: "operator",
      path: "/api/runs/none-a1/retry",
      body: { reason: "auth table" },
      allowed: [404],
    },
  };
const PAGES = [
  "/claims",
  "/rebuilds",
  "/rebuilds/slow",
  "/runs",
  "/runs/none-a1",
  "/queue",
  "/workers",
  "/alerts",
  "/audit",
];

let bed: TestBed;
let base: string;
let stopWeb: () => Promise<void>;
const seenBodies: string[] = [];

before(async () => {
  bed = await createTestBed({ slow: { output: "out/slow", steps: [{ name: "s", run: ["true"] }] } });
  const web = await startWebServer(bed, {
    CLAIMWATCH_OPERATOR_TOKEN: `olga:${TOKENS.operator},ratey:${TOKENS.ratey}`,
    CLAIMWATCH_VIEWER_TOKEN: `victor:${TOKENS.viewer}`,
  });
  base = web.url;
  stopWeb = web.stop;
});
after(async () => {
  await stopWeb?.();
  await bed?.close();
});

async function send(
  method: string,
  url: string,
  options: { token?: string; cookie?: string; origin?: string; body?: unknown; stream?: boolean } = {},
) {
  const headers: Record<string, string> = {};
  if (options.token) headers.authorization = `Bearer ${options.token}`;
  if (options.cookie) headers.cookie = options.cookie;
  if (options.origin) headers.origin = options.origin;
  if (options.body !== undefined) headers["content-type"] = "application/json";
  const started = performance.now();
  const response = await fetch(`${base}${url}`, {
    method,
    headers,
    body: options.body === undefined ? undefined : JSON.stringify(options.body),
    redirect: "manual",
  });
  let text = "";
  if (options.stream && response.ok) await response.body?.cancel();
  else text = await response.text();
  seenBodies.push(text);
  return { status: response.status, text, headers: response.headers, ms: performance.now() - started };
}

const tokenOf = (caller: Caller) => (caller === "anonymous" ? undefined : TOKENS[caller]);

function expectedStatus(role: Requirement, caller: Caller, allowed: number[]): number[] {
  if (role === "public") return allowed;
  if (caller === "anonymous") return [401];
  if (role === "operator" && caller === "viewer") return [403];
  return allowed;
}

test("the table lists every API route (a new route needs an entry)", () => {
  const found: string[] = [];
  const walk = (dir: string) => {
    for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
      const full = path.join(dir, entry.name);
      if (entry.isDirectory()) walk(full);
      else if (entry.name === "route.ts") {
        const source = fs.readFileSync(full, "utf8");
        const route = `/${path.relative("app", path.dirname(full)).split(path.sep).join("/")}`;
        for (const [, method] of source.matchAll(
          /export (?:const|async function|function) (GET|POST|PUT|PATCH|DELETE)\b/g,
        )) {
          found.push(`${method} ${route}`);
        }
      }
    }
  };
  walk("app/api");
  assert.deepEqual(found.sort(), Object.keys(ROUTES).sort());
});

for (const caller of ["anonymous", "viewer", "operator"] as const) {
  test(`every route as ${caller}`, async () => {
    for (const [name, entry] of Object.entries(ROUTES)) {
      const [method] = name.split(" ");
      const result = await send(method!, entry.path, {
        token: tokenOf(caller),
        body: entry.body,
        stream: entry.stream === true,
      });
      assert.ok(
        expectedStatus(entry.role, caller, entry.allowed).includes(result.status),
        `${name} as ${caller}: ${result.status} ${result.text.slice(0, 200)}`,
      );
      if (result.status >= 400 && !entry.allowed.includes(result.status))
        assert.match(result.text, /^\{"error":\{"code":"[a-z-]+","message":"[^"]+"\}\}$/);
    }
  });
}

test("pages redirect anonymous visitors to the login page, and render for a viewer", async () => {
  for (const page of PAGES) {
    const anonymous = await send("GET", page);
    assert.equal(anonymous.status, 307, page);
    assert.match(anonymous.headers.get("location") ?? "", /\/login$/);
    const viewer = await send("GET", page, { token: TOKENS.viewer });
    // A run no record has is a 404 page (after the login check, like any page).
    assert.equal(viewer.status, page === "/runs/none-a1" ? 404 : 200, page);
    assert.doesNotMatch(
      viewer.text,
      />(Force release|Rebuild now)<\/button>/,
      `no operator controls on ${page} for a viewer`,
    );
  }
});

test("operators do get the controls (so the viewer check above can fail)", async () => {
  const rebuilds = await send("GET", "/rebuilds", { token: TOKENS.operator });
  assert.match(rebuilds.text, />Rebuild now<\/button>/);
});

test("a cookie session: httpOnly SameSite=Strict; a cross-origin POST with it is refused, a same-origin one allowed", async () => {
  const login = await send("POST", "/api/auth/login", { body: { token: TOKENS.operator } });
  assert.equal(login.status, 200);
  const setCookie = login.headers.get("set-cookie") ?? "";
  assert.match(setCookie, /^cw_session=[^;]+; Path=\/; HttpOnly; SameSite=Strict; Max-Age=\d+/);
  const cookie = setCookie.split(";")[0]!;
  assert.ok(!setCookie.includes(TOKENS.operator), "the cookie does not carry the token");

  const me = await send("GET", "/api/auth/me", { cookie });
  assert.deepEqual(JSON.parse(me.text), { name: "olga", role: "operator" });

  const evil = await send("POST", "/api/rebuilds/slow/runs", {
    cookie,
    origin: "http://evil.example",
    body: { version: "csrf" },
  });
  assert.equal(evil.status, 403);
  assert.match(evil.text, /cross-origin/);
  const noOrigin = await send("POST", "/api/rebuilds/slow/runs", { cookie, body: { version: "csrf" } });
  assert.equal(noOrigin.status, 403, "a cookie mutation without Origin or Sec-Fetch-Site is refused");
  const same = await send("POST", "/api/rebuilds/slow/runs", { cookie, origin: base, body: { version: "csrf" } });
  assert.equal(same.status, 202);
  const bearer = await send("POST", "/api/rebuilds/slow/runs", {
    token: TOKENS.operator,
    origin: "http://evil.example",
    body: { version: "bearer" },
  });
  assert.equal(bearer.status, 202, "a Bearer token works without a cookie (no CSRF risk)");

  const tampered = await send("GET", "/api/auth/me", { cookie: cookie.replace(/.$/, (c) => (c === "A" ? "B" : "A")) });
  assert.equal(tampered.status, 401, "a tampered cookie is refused");
  const logout = await send("POST", "/api/auth/logout", { cookie, body: {} });
  assert.match(logout.headers.get("set-cookie") ?? "", /cw_session=; .*Max-Age=0/);
  assert.equal(
    (await send("GET", "/api/auth/me", { cookie })).status,
    401,
    "a copy of the logged-out cookie is refused",
  );
  const page = await send("GET", "/claims", { cookie });
  assert.equal(page.status, 307, "pages send the logged-out cookie to the login page");
  assert.match(page.headers.get("location") ?? "", /\/login$/);
  const audit = await send("GET", "/api/audit", { token: TOKENS.operator });
  assert.match(audit.text, /"action":"logout"/);
});

test("a live-event stream opened with a session ends, saying so, once that session is logged out", async () => {
  const login = await send("POST", "/api/auth/login", { body: { token: TOKENS.viewer } });
  const cookie = (login.headers.get("set-cookie") ?? "").split(";")[0]!;
  const controller = new AbortController();
  const stream = await fetch(`${base}/api/events`, { headers: { cookie }, signal: controller.signal });
  assert.equal(stream.status, 200);
  let text = "";
  const reading = (async () => {
    const decoder = new TextDecoder();
    for await (const chunk of stream.body!) text += decoder.decode(chunk as Uint8Array, { stream: true });
  })();
  try {
    await until("the stream's ready event", async () => text.includes("event: ready"), 10_000);
    const logout = await send("POST", "/api/auth/logout", { cookie, body: {} });
    assert.equal(logout.status, 200);
    // At the next heartbeat (15 s): the event, then the end of the stream.
    await Promise.race([
      reading,
      new Promise((_, reject) => setTimeout(() => reject(new Error(`stream still open:\n${text}`)), 30_000)),
    ]);
    assert.match(text, /event: unauthenticated\n/);
  } finally {
    controller.abort();
  }
});

test("repeated bad logins are slowed down and audited as refused", async () => {
  const durations: number[] = [];
  for (let i = 0; i < 4; i++) {
    const result = await send("POST", "/api/auth/login", { body: { token: `wrong-token-${i}-0123456789` } });
    assert.equal(result.status, 401);
    durations.push(result.ms);
  }
  assert.ok(
    durations[3]! > durations[0]! && durations[3]! >= 900,
    `each failure answers slower: ${durations.map(Math.round)}`,
  );
  const audit = JSON.parse((await send("GET", "/api/audit?limit=200", { token: TOKENS.viewer })).text) as {
    entries: { action: string; result: string; actor: string }[];
  };
  const refusedLogins = audit.entries.filter((e) => e.action === "login" && e.result === "refused");
  assert.ok(refusedLogins.length >= 4, `refused logins audited: ${refusedLogins.length}`);
  assert.ok(
    audit.entries.some((e) => e.action === "trigger" && e.result === "refused" && e.actor === "victor (viewer)"),
    "a viewer's refused trigger is audited",
  );
});

test("triggers are rate limited per identity: 429 with Retry-After, audited", async () => {
  let limited: Awaited<ReturnType<typeof send>> | undefined;
  for (let i = 0; i < 40 && !limited; i++) {
    const result = await send("POST", "/api/rebuilds/slow/runs", { token: TOKENS.ratey, body: { version: "same" } });
    if (result.status === 429) limited = result;
    else assert.equal(result.status, 202);
  }
  assert.ok(limited, "the limit was reached");
  assert.ok(Number(limited.headers.get("retry-after")) >= 1);
  const other = await send("POST", "/api/rebuilds/slow/runs", { token: TOKENS.operator, body: { version: "same" } });
  assert.equal(other.status, 202, "another identity is not affected");
  const audit = JSON.parse((await send("GET", "/api/audit?limit=300", { token: TOKENS.viewer })).text) as {
    entries: { action: string; result: string; actor: string; reason: string }[];
  };
  assert.ok(
    audit.entries.some(
      (e) => e.actor === "ratey (operator)" && e.result === "refused" && /rate limited/.test(e.reason),
    ),
  );
});

test("a flood of anonymous refused mutations neither pushes real entries out of the audit log nor fills Redis: 100 audited one by one in the window, then one per hundred with the count, long paths cut", async () => {
  const auditLength = () => bed.main.xlen(bed.keys.auditLog);
  const before = await auditLength();
  const longId = "A".repeat(3_900);
  // 250 refusals, 16 at a time (helper-137 sent 2 000 with 4 KB paths: one 5 KB entry each).
  for (let i = 0; i < 250; i += 16) {
    const batch = Array.from({ length: Math.min(16, 250 - i) }, (_, j) =>
      send("POST", `/api/jobs/${longId}${i + j}/cancel`, { body: { reason: "flood of refusals" } }),
    );
    for (const result of await Promise.all(batch)) assert.equal(result.status, 401);
  }
  const added = (await auditLength()) - before;
  // Earlier tests' anonymous refusals count in the same window: at most the first hundred, plus the 200th.
  assert.ok(added <= 101 && added >= 1, `audit entries added: ${added}`);
  const entries = (await bed.main.xrevrange(bed.keys.auditLog, "+", "-", "COUNT", 5)).map(([, fields]) => {
    const entry: Record<string, string> = {};
    for (let i = 0; i + 1 < fields.length; i += 2) entry[fields[i]!] = fields[i + 1]!;
    return entry;
  });
  const counted = entries.find((entry) => /"refusalsInWindow":200/.test(entry.detail ?? ""));
  assert.ok(counted, `the 200th refusal is audited with the count: ${JSON.stringify(entries.map((e) => e.detail))}`);
  assert.equal(counted.actor, "anonymous");
  const detail = JSON.parse(counted.detail!) as { path: string };
  assert.ok(detail.path.length < 400, `the path is cut: ${detail.path.length} characters`);
  assert.match(detail.path, /… \(\d+ characters\)$/);
});

test("no response ever contained a token", () => {
  for (const body of seenBodies) for (const token of Object.values(TOKENS)) assert.ok(!body.includes(token));
});
