/**
 * HTTP API contract, against the real web server (`npm run web`) and a real Redis: every
 * endpoint's shape, and every kind of bad input answered 400/404 with a message naming the field —
 * never a 500, and never a Redis key built from unchecked input.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { after, before, test } from "node:test";
import { acquireClaim, claimName, releaseClaim } from "../../lib/claims";
import { upsertSchedule } from "../../lib/rebuilds/schedules";
import { DEFAULT_RETENTION } from "../../lib/runs/records";
import { importRunInto } from "../../lib/runs/writer";
import { markRebuilt } from "../support/runs";
import { createTestBed, startWebServer, type TestBed } from "../support/stack";
import { until } from "../support/until";

const OPERATOR_TOKEN = "api-test-operator-token-0123456789";
let bed: TestBed;
let base: string;
let stopWeb: () => Promise<void>;

before(async () => {
  bed = await createTestBed({
    slow: { output: "out/slow", steps: [{ name: "s", run: ["true"] }] },
    tenanted: { output: "out/tenanted", tenants: ["acme", "globex"], steps: [{ name: "s", run: ["true"] }] },
    // Its input is a FIFO nobody writes to: opening it blocks, as on a hung network mount.
    "stuck-input": { output: "out/stuck-input", inputs: ["stuck-input.fifo"], steps: [{ name: "s", run: ["true"] }] },
    "plain-input": { output: "out/plain-input", inputs: ["plain-input.txt"], steps: [{ name: "s", run: ["true"] }] },
    // Scheduled once a year: its scheduler's next tick, once upserted, waits in the queue all test long.
    nightly: {
      output: "out/nightly",
      schedule: { cron: "0 3 1 1 *", tz: "UTC" },
      steps: [{ name: "s", run: ["true"] }],
    },
  });
  assert.equal(spawnSync("mkfifo", [path.join(bed.dir, "stuck-input.fifo")]).status, 0, "mkfifo");
  fs.writeFileSync(path.join(bed.dir, "plain-input.txt"), "plain");
  const web = await startWebServer(bed, { CLAIMWATCH_OPERATOR_TOKEN: `tester:${OPERATOR_TOKEN}` });
  base = web.url;
  stopWeb = web.stop;
});
after(async () => {
  await stopWeb?.();
  await bed?.close();
});

async function call(method: string, path: string, body?: unknown, raw?: string) {
  const response = await fetch(`${base}${path}`, {
    method,
    headers: {
      authorization: `Bearer ${OPERATOR_TOKEN}`,
      ...(body !== undefined || raw !== undefined ? { "content-type": "application/json" } : {}),
    },
    body: raw ?? (body === undefined ? undefined : JSON.stringify(body)),
  });
  return { status: response.status, body: (await response.json()) as Record<string, unknown> };
}

function assertError(
  result: { status: number; body: Record<string, unknown> },
  status: number,
  message: RegExp,
  code?: string,
) {
  assert.equal(result.status, status, JSON.stringify(result.body));
  const error = result.body.error as { code: string; message: string };
  assert.equal(typeof error?.code, "string", JSON.stringify(result.body));
  if (code !== undefined) assert.equal(error.code, code, JSON.stringify(result.body));
  assert.match(error.message, message);
}

test("GET /api/health reports both Redis servers and the workers", async () => {
  const { status, body } = await call("GET", "/api/health");
  assert.equal(status, 200);
  assert.equal(body.ok, true);
  assert.deepEqual(Object.keys(body.redis as object).sort(), [
    "durability",
    "evictionPolicy",
    "ok",
    "persistence",
    "version",
  ]);
  assert.equal(body.workers, 0);
});

test("GET /api/claims: an empty list, and bad paging is refused naming the field", async () => {
  const { status, body } = await call("GET", "/api/claims");
  assert.equal(status, 200);
  assert.deepEqual(body.claims, []);
  assert.equal(body.nextCursor, null);
  assert.equal(typeof body.serverTime, "number");
  assertError(await call("GET", "/api/claims?limit=0"), 400, /^limit: must be a whole number from 1 to 1000/);
  assertError(await call("GET", "/api/claims?limit=1001"), 400, /^limit: /);
  assertError(await call("GET", "/api/claims?limit=ten"), 400, /^limit: /);
  assertError(await call("GET", "/api/claims?color=red"), 400, /unknown field 'color'/);
  assertError(await call("GET", "/api/claims?cursor=a*b"), 400, /^cursor: /);
  assertError(await call("GET", "/api/claims?limit=1&limit=2"), 400, /^limit: given more than once/);
});

test("POST /api/claims/release: malformed, mistyped and unknown-field bodies are 400, an oversized one 413; a free claim is 409 missing", async () => {
  assertError(await call("POST", "/api/claims/release", undefined, "{not json"), 400, /^body: malformed JSON/);
  assertError(
    await call("POST", "/api/claims/release", { name: "x", token: "t", reason: "x".repeat(20_000) }),
    413,
    /^body: larger than 16384 bytes/,
  );
  assertError(
    await call("POST", "/api/claims/release", { name: "output:/x", token: 5, reason: "why not" }),
    400,
    /^token: /,
  );
  assertError(
    await call("POST", "/api/claims/release", { name: "output:/x", token: "t", reason: "ok ok", admin: true }),
    400,
    /unknown field 'admin'/,
  );
  assertError(await call("POST", "/api/claims/release", { name: "output:/x", token: "t" }), 400, /^reason: /);
  // A reason is one line for the audit log: a line break or another control character is refused,
  // by every route that takes one; so is one over 500 characters.
  for (const [route, body] of [
    ["/api/claims/release", { name: "output:/x", token: "t" }],
    ["/api/rebuilds/slow/runs", {}],
    ["/api/jobs/run-x/cancel", {}],
  ] as const) {
    for (const [reason, problem] of [
      ["fine\nforged entry", /^reason: must be one line without control characters/],
      ["bell \u0007", /^reason: must be one line without control characters/],
      ["x".repeat(501), /^reason: must be at most 500 characters/],
    ] as const) {
      assertError(await call("POST", route, { ...body, reason }), 400, problem);
    }
  }
  assertError(
    await call("POST", "/api/claims/release", { name: "output:/../etc", token: "t", reason: "because" }),
    400,
    /^name: /,
  );
  assertError(
    await call("POST", "/api/claims/release", { name: "output:/x*", token: "t", reason: "because" }),
    400,
    /^name: /,
  );
  assertError(await call("POST", "/api/claims/release", [1, 2]), 400, /.+/);
  const missing = await call("POST", "/api/claims/release", {
    name: "output:/srv/nothing",
    token: "t",
    reason: "cleanup",
  });
  assertError(
    missing,
    409,
    /^not released: nobody holds output:\/srv\/nothing \(it expired or was released\)$/,
    "missing",
  );
  assert.equal(missing.body.status, "missing", "the outcome stays beside the error (the dashboard reads it)");
});

test("POST /api/rebuilds/{name}/runs: 202 queued, a duplicate while waiting is deduplicated; unknown names 404; bad fields 400", async () => {
  const first = await call("POST", "/api/rebuilds/slow/runs", { version: "v1" });
  assert.equal(first.status, 202);
  assert.equal(first.body.status, "queued");
  assert.match(String(first.body.jobId), /^run-/);
  const again = await call("POST", "/api/rebuilds/slow/runs", { version: "v1" });
  assert.equal(again.status, 202);
  assert.deepEqual(again.body, { jobId: first.body.jobId, status: "deduplicated" });
  const forced = await call("POST", "/api/rebuilds/slow/runs", { version: "v1", force: true });
  assert.equal(forced.body.status, "queued", "force is a different request");

  const tenanted = await call("POST", "/api/rebuilds/tenanted/runs", { tenant: "acme" });
  assert.equal(tenanted.status, 202);
  // A tenant the rebuild does not have is bad input (400 naming the field); the URL's rebuild is what may be 404.
  assertError(
    await call("POST", "/api/rebuilds/tenanted/runs", {}),
    400,
    /^tenant: rebuild 'tenanted' needs a tenant, one of: acme, globex$/,
    "bad-request",
  );
  assertError(
    await call("POST", "/api/rebuilds/tenanted/runs", { tenant: "initech" }),
    400,
    /^tenant: 'initech' is not a tenant of rebuild 'tenanted'; its tenants: acme, globex$/,
    "bad-request",
  );
  assertError(
    await call("POST", "/api/rebuilds/slow/runs", { tenant: "acme" }),
    400,
    /^tenant: rebuild 'slow' has no tenants/,
    "bad-request",
  );
  assertError(
    await call("POST", "/api/rebuilds/nope/runs", {}),
    404,
    /no rebuild named 'nope'; rebuilds: slow, tenanted/,
  );
  assertError(await call("POST", "/api/rebuilds/..%2F..%2Fetc/runs", {}), 404, /no rebuild named/);
  assertError(await call("POST", "/api/rebuilds/slow/runs", { version: "../x" }), 400, /^version: /);
  assertError(await call("POST", "/api/rebuilds/slow/runs", { force: "yes" }), 400, /^force: /);
  assertError(await call("POST", "/api/rebuilds/slow/runs", { priority: 1 }), 400, /unknown field 'priority'/);
  assertError(await call("POST", "/api/rebuilds/slow/runs", undefined, "[]"), 400, /.+/);
});

test("GET /api/rebuilds/{name}/preview says what Rebuild now would do, and whether a worker is live to do it", async () => {
  const preview = await call("GET", "/api/rebuilds/slow/preview?version=v9");
  assert.deepEqual(preview.body, { outcome: "runs", version: "v9", workersLive: 0 });
  const { beat, newWorkerIdentity, retire } = await import("../../lib/workers/heartbeat");
  const worker = newWorkerIdentity("test");
  await beat(bed.main, bed.keys, worker, null);
  try {
    assert.deepEqual((await call("GET", "/api/rebuilds/slow/preview?version=v9")).body, {
      outcome: "runs",
      version: "v9",
      workersLive: 1,
    });
  } finally {
    await retire(bed.main, bed.keys, worker.id);
  }
  // Live workers whose definitions lack the rebuild (a deploy under way, black-box helper-180): the
  // job would wait for one that declares it, then fail; one worker that declares it is enough.
  const old = newWorkerIdentity("test", { declares: ["other"] });
  const current = newWorkerIdentity("test", { declares: ["other", "slow"] });
  await beat(bed.main, bed.keys, old, null);
  try {
    const waits = (await call("GET", "/api/rebuilds/slow/preview?version=v9")).body as Record<string, unknown>;
    assert.equal(waits.outcome, "waits-for-worker", JSON.stringify(waits));
    assert.equal(waits.workersLive, 1);
    assert.match(
      String(waits.message),
      /^would wait: no live worker declares rebuild 'slow' .*up to 40 pickups \(about 10 min\), then fails$/,
    );
    await beat(bed.main, bed.keys, current, null);
    assert.deepEqual((await call("GET", "/api/rebuilds/slow/preview?version=v9")).body, {
      outcome: "runs",
      version: "v9",
      workersLive: 2,
    });
  } finally {
    await retire(bed.main, bed.keys, old.id);
    await retire(bed.main, bed.keys, current.id);
  }
  assertError(await call("GET", "/api/rebuilds/slow/preview?version=a%20b"), 400, /^version: /);
});

test("the preview says a run would fail when its output is another claim's directory (a second path to it)", async () => {
  const output = path.join(bed.dir, "out", "slow");
  const file = path.join(output, ".claimwatch-claim");
  fs.mkdirSync(output, { recursive: true });
  const original = fs.existsSync(file) ? fs.readFileSync(file) : null;
  fs.writeFileSync(file, "/mnt/elsewhere/slow\n");
  try {
    const preview = await call("GET", "/api/rebuilds/slow/preview?version=v9");
    const body = preview.body as { outcome: string; version: string; message: string };
    assert.equal(body.outcome, "fails", JSON.stringify(body));
    assert.equal(body.version, "v9");
    assert.match(body.message, /^would fail: output .*out\/slow is the directory of claim '\/mnt\/elsewhere\/slow'/);
  } finally {
    if (original) fs.writeFileSync(file, original);
    else fs.rmSync(file);
  }
  // Its own claim named there: runs.
  fs.writeFileSync(file, `${claimName(fs.realpathSync(output))}\n`);
  try {
    assert.deepEqual((await call("GET", "/api/rebuilds/slow/preview?version=v9")).body, {
      outcome: "runs",
      version: "v9",
      workersLive: 0,
    });
  } finally {
    if (original) fs.writeFileSync(file, original);
    else fs.rmSync(file);
  }
});

test("the preview answers within its time limit when an input cannot be read (a hung mount), and the server stays up", async () => {
  const preview = () =>
    fetch(`${base}/api/rebuilds/stuck-input/preview`, {
      headers: { authorization: `Bearer ${OPERATOR_TOKEN}` },
      signal: AbortSignal.timeout(30_000), // a hang fails the test instead of stalling it
    }).then(async (response) => ({
      status: response.status,
      body: (await response.json()) as Record<string, unknown>,
    }));
  // More polls at once than Node's thread pool has threads (4): each waiting in its own open()
  // of the FIFO, they would leave no thread for any other file read of the server.
  const answers = await Promise.all(Array.from({ length: 6 }, preview));
  for (const answer of [...answers, await preview()]) {
    assertError(answer, 400, /^version: the inputs were not read within 3 s here; give a version$/);
  }
  assert.equal((await call("GET", "/api/health")).status, 200);
  const plain = await call("GET", "/api/rebuilds/plain-input/preview");
  assert.equal(plain.status, 200, JSON.stringify(plain.body));
  assert.match(String(plain.body.version), /^in-[0-9a-f]{16}$/, "another rebuild's inputs are still read");
  assert.deepEqual((await call("GET", "/api/rebuilds/stuck-input/preview?version=v1")).body, {
    outcome: "runs",
    version: "v1",
    workersLive: 0,
  });
});

test("the preview checks in the worker's order: already rebuilt first, then the claim", async () => {
  const name = claimName(bed.definitions.rebuilds.get("slow")!.claimPath);
  const grant = await acquireClaim(
    bed.claims,
    bed.keys,
    name,
    { version: "other" },
    { ttlMs: 30_000, refreshEveryMs: 10_000 },
  );
  assert.equal(grant.status, "acquired");
  // Marked as a publish's own final write under its claim marks it (counts without asking the claims Redis).
  await markRebuilt(bed.main, bed.keys, { rebuild: "slow", version: "done", claim: name }, "run-earlier-a1");
  try {
    const repeat = await call("GET", "/api/rebuilds/slow/preview?version=done");
    assert.equal(repeat.body.outcome, "skip");
    assert.equal(repeat.body.reason, "already-rebuilt", "skipped at once, as the worker does, not left waiting");
    const forced = await call("GET", "/api/rebuilds/slow/preview?version=done&force=true");
    assert.equal(forced.body.outcome, "defer", "forced: the claim held for another version makes it wait");
  } finally {
    if (grant.status === "acquired") await releaseClaim(bed.claims, bed.keys, name, grant.token);
  }
});

test("GET /api/rebuilds lists each rebuild and tenant with schedule, last run, skips and claim", async () => {
  const { status, body } = await call("GET", "/api/rebuilds");
  assert.equal(status, 200);
  const rows = body.rebuilds as {
    name: string;
    tenant: string | null;
    schedule: unknown;
    claim: unknown;
    consecutiveSkips: number;
  }[];
  assert.deepEqual(
    rows.map((r) => `${r.name}/${r.tenant ?? ""}`),
    ["slow/", "tenanted/acme", "tenanted/globex", "stuck-input/", "plain-input/", "nightly/"],
  );
  for (const row of rows) {
    assert.equal(row.schedule === null, row.name !== "nightly", row.name);
    assert.equal(row.claim, null);
    assert.equal(row.consecutiveSkips, 0);
  }
});

/** A finished first attempt of job `jobId`, version v1, as the history seeds it. */
function finishedRun(
  jobId: string,
  rebuild: string,
  status: "rebuilt" | "skipped" | "failed",
  at: number,
  tenant: string | null = null,
) {
  return {
    id: `${jobId}-a1`,
    jobId,
    attempt: 1,
    rebuild,
    tenant,
    version: "v1",
    status,
    reason: null,
    trigger: "api" as const,
    workerId: null,
    host: null,
    createdAt: at,
    startedAt: at,
    finishedAt: at + 10,
    durationMs: 10,
    fence: null,
    buildHash: null,
    idempotencyKey: null,
    progress: 1,
    steps: [],
  };
}

test("GET /api/runs pages newest first with cursors, filters, and refuses bad filters", async () => {
  const now = Date.now();
  const seed = bed.main.multi();
  for (let i = 0; i < 25; i++) {
    const at = now - (25 - i) * 1000;
    importRunInto(
      seed,
      bed.keys,
      finishedRun(
        `seed-${String(i).padStart(2, "0")}`,
        i % 2 ? "slow" : "tenanted",
        i % 5 === 0 ? "skipped" : "rebuilt",
        at,
        i % 2 ? null : "acme",
      ),
      DEFAULT_RETENTION,
    );
  }
  await seed.exec();
  const seen: string[] = [];
  let cursor: string | null = null;
  do {
    const page = await call("GET", `/api/runs?limit=10${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`);
    assert.equal(page.status, 200);
    seen.push(...(page.body.runs as { id: string }[]).map((r) => r.id));
    cursor = page.body.nextCursor as string | null;
  } while (cursor);
  const seeded = seen.filter((id) => id.startsWith("seed-"));
  assert.equal(seeded.length, 25, "every run once");
  assert.deepEqual(seeded, [...seeded].sort().reverse(), "newest first");

  const skippedSlow = await call("GET", "/api/runs?rebuild=slow&status=skipped");
  assert.ok(
    (skippedSlow.body.runs as { rebuild: string; status: string }[]).every(
      (r) => r.rebuild === "slow" && r.status === "skipped",
    ),
  );
  const acme = await call("GET", "/api/runs?rebuild=tenanted&tenant=acme&limit=100");
  assert.equal((acme.body.runs as unknown[]).length, 13);
  const byJob = await call("GET", "/api/runs?jobId=seed-03");
  assert.deepEqual(
    (byJob.body.runs as { id: string }[]).map((r) => r.id),
    ["seed-03-a1"],
  );

  const skippedTenanted = await call("GET", "/api/runs?rebuild=tenanted&tenant=acme&status=skipped&limit=2");
  const firstPage = skippedTenanted.body.runs as { id: string; status: string; tenant: string }[];
  assert.equal(firstPage.length, 2);
  assert.ok(firstPage.every((r) => r.status === "skipped" && r.tenant === "acme"));
  const secondPage = await call(
    "GET",
    `/api/runs?rebuild=tenanted&tenant=acme&status=skipped&limit=2&cursor=${encodeURIComponent(String(skippedTenanted.body.nextCursor))}`,
  );
  // Seeded: i = 0, 10, 20 are tenanted, acme and skipped (i % 5 === 0 and even).
  assert.deepEqual(
    [...firstPage, ...(secondPage.body.runs as { id: string }[])].map((r) => r.id),
    ["seed-20-a1", "seed-10-a1", "seed-00-a1"],
  );
  assert.equal(secondPage.body.nextCursor, null);
  assertError(await call("GET", "/api/runs?tenant=acme"), 400, /^tenant: give the rebuild/);
  assertError(await call("GET", "/api/runs?status=exploded"), 400, /^status: must be one of queued, running/);
  assertError(await call("GET", "/api/runs?limit=201"), 400, /^limit: /);
  assertError(await call("GET", "/api/runs?cursor=garbage"), 400, /^cursor: /);
  assertError(await call("GET", "/api/runs?rebuild=nope"), 400, /^rebuild: no rebuild named 'nope'/);
  assertError(await call("GET", "/api/runs?rebuild=slow&tenant=acme"), 400, /^tenant: /);
  assertError(await call("GET", "/api/runs?jobId=a%20b"), 400, /^jobId: /);
});

test("GET /api/runs/{id}: one run with steps and log; bad and unknown ids", async () => {
  const { status, body } = await call("GET", "/api/runs/seed-03-a1");
  assert.equal(status, 200);
  assert.equal(body.id, "seed-03-a1");
  assert.deepEqual(body.steps, []);
  assert.deepEqual(body.log, []);
  assertError(await call("GET", "/api/runs/seed-99-a1"), 404, /no run seed-99-a1/);
  assertError(await call("GET", "/api/runs/..%2F..%2Fetc"), 404, /^no run \.\.\/\.\.\/etc/);
});

test("GET /api/workers and /api/audit (triggers are audited); bad audit cursor", async () => {
  const workers = await call("GET", "/api/workers");
  assert.deepEqual(workers.body.workers, []);
  const audit = await call("GET", "/api/audit?limit=100");
  const entries = audit.body.entries as { action: string; result: string; detail: { rebuild?: string } }[];
  assert.ok(
    entries.some((e) => e.action === "trigger" && e.detail.rebuild === "slow"),
    "Rebuild now is audited",
  );
  assert.ok(
    entries.some((e) => e.action === "force-release" && e.result === "refused"),
    "the missing release is audited",
  );
  assertError(await call("GET", "/api/audit?cursor=x"), 400, /^cursor: /);
  assertError(await call("GET", "/api/audit?limit=501"), 400, /^limit: /);
});

test("a tenant in a body or query string that the rebuild does not have is a 400 naming the field; an unknown rebuild in the URL stays a 404", async () => {
  // The preview: the tenant says what to preview, as the trigger's body does.
  assertError(
    await call("GET", "/api/rebuilds/slow/preview?tenant=acme&version=v1"),
    400,
    /^tenant: rebuild 'slow' has no tenants/,
    "bad-request",
  );
  assertError(
    await call("GET", "/api/rebuilds/tenanted/preview?tenant=initech&version=v1"),
    400,
    /^tenant: 'initech' is not a tenant of rebuild 'tenanted'; its tenants: acme, globex$/,
    "bad-request",
  );
  assertError(
    await call("GET", "/api/rebuilds/tenanted/preview?version=v1"),
    400,
    /^tenant: rebuild 'tenanted' needs a tenant, one of: acme, globex$/,
    "bad-request",
  );
  assertError(await call("GET", "/api/rebuilds/nope/preview?version=v1"), 404, /^no rebuild named 'nope'/, "not-found");

  // A rebuild's page data, narrowed to one tenant (the page /rebuilds/{name}/{tenant} is a 404: its path names it).
  assertError(await call("GET", "/api/rebuilds/slow?tenant=acme"), 400, /^tenant: rebuild 'slow' has no tenants/);
  assertError(
    await call("GET", "/api/rebuilds/tenanted?tenant=initech"),
    400,
    /^tenant: 'initech' is not a tenant of rebuild 'tenanted'/,
    "bad-request",
  );
  assertError(await call("GET", "/api/rebuilds/nope?tenant=acme"), 404, /^no rebuild named 'nope'/, "not-found");
  const acme = await call("GET", "/api/rebuilds/tenanted?tenant=acme");
  assert.equal(acme.status, 200, JSON.stringify(acme.body));
  assert.equal(acme.body.entriesTotal, 1);

  // Pause/resume: the body's tenant.
  assertError(
    await call("POST", "/api/rebuilds/nightly/schedule", { action: "pause", tenant: "acme", reason: "typo check" }),
    400,
    /^tenant: rebuild 'nightly' has no tenants/,
    "bad-request",
  );
  assertError(
    await call("POST", "/api/rebuilds/nope/schedule", { action: "pause", reason: "typo check" }),
    404,
    /^no rebuild named 'nope'; rebuilds: .*nightly/,
    "not-found",
  );
  assertError(
    await call("POST", "/api/rebuilds/slow/schedule", { action: "pause", reason: "typo check" }),
    400,
    /^rebuild 'slow' has no schedule \(it runs on demand only\); scheduled rebuilds: nightly/,
    "bad-request",
  );
  // A refused resume is audited as a resume (the action is the body's), and counted as one.
  assertError(
    await call("POST", "/api/rebuilds/nope/schedule", { action: "resume", reason: "typo check resume" }),
    404,
    /no rebuild named 'nope'/,
    "not-found",
  );
  const refusals = (await call("GET", "/api/audit?limit=100")).body.entries as {
    action: string;
    result: string;
    reason: string;
  }[];
  assert.deepEqual(
    refusals
      .filter((e) => e.result === "refused" && /no rebuild named 'nope'/.test(e.reason) && /schedule/.test(e.action))
      .map((e) => e.action)
      .sort(),
    ["pause-schedule", "resume-schedule"],
  );
  // A body naming neither is refused and audited as a schedule change, not as a pause (helper-137).
  assertError(
    await call("POST", "/api/rebuilds/slow/schedule", { action: "stop", reason: "wrong action word" }),
    400,
    /action: must be pause or resume/,
    "bad-request",
  );
  const stop = ((await call("GET", "/api/audit?limit=20")).body.entries as { action: string; reason: string }[]).find(
    (e) => /must be pause or resume/.test(e.reason),
  );
  assert.equal(stop?.action, "change-schedule");

  // The queue's filter, as the runs' filter (and `claimwatch queue`) has it: without a tenant, all of them.
  assertError(
    await call("GET", "/api/queue?rebuild=slow&tenant=acme"),
    400,
    /^tenant: rebuild 'slow' has no tenants/,
    "bad-request",
  );
  assertError(
    await call("GET", "/api/queue?rebuild=tenanted&tenant=initech"),
    400,
    /^tenant: 'initech' is not a tenant of rebuild 'tenanted'; its tenants: acme, globex$/,
    "bad-request",
  );
  assertError(await call("GET", "/api/queue?rebuild=nope"), 400, /^rebuild: no rebuild named 'nope'; rebuilds: /);
  assert.equal((await call("GET", "/api/queue?rebuild=tenanted")).status, 200);
  assert.equal((await call("GET", "/api/queue?rebuild=tenanted&tenant=globex")).status, 200);
});

test("a refused operation is a 409 in the error shape, its outcome kept beside the error: release, retry, cancel", async () => {
  const name = claimName(bed.definitions.rebuilds.get("plain-input")!.claimPath);
  const grant = await acquireClaim(
    bed.claims,
    bed.keys,
    name,
    { version: "v1" },
    { ttlMs: 30_000, refreshEveryMs: 10_000 },
  );
  assert.equal(grant.status, "acquired");
  try {
    const notOwner = await call("POST", "/api/claims/release", { name, token: "not-its-token", reason: "stale row" });
    assertError(
      notOwner,
      409,
      /^not released: \S+ is held with another token now \(by .+\); nothing changed$/,
      "not-owner",
    );
    // The dashboard's release dialog and the CLI read these.
    assert.equal(notOwner.body.status, "not-owner");
    assert.equal(typeof notOwner.body.auditId, "string");
    assert.ok("currentHolder" in notOwner.body, JSON.stringify(notOwner.body));
    // Who holds it now, in full: the version and fence as well as the host.
    assert.match(String(notOwner.body.currentHolder), /version v1, fence \d+\)$/, JSON.stringify(notOwner.body));
    if (grant.status === "acquired") assert.equal(notOwner.body.currentFence, grant.fence);
  } finally {
    if (grant.status === "acquired") await releaseClaim(bed.claims, bed.keys, name, grant.token);
  }

  const at = Date.now() - 60_000;
  const seed = bed.main.multi();
  const history = (id: string, rebuild: string, status: "rebuilt" | "failed") =>
    importRunInto(seed, bed.keys, finishedRun(id, rebuild, status, at), DEFAULT_RETENTION);
  history("refusal-done", "slow", "rebuilt");
  history("refusal-retired", "retired", "failed"); // its rebuild is no longer defined
  // A job whose first attempt failed and whose second rebuilt (the queue retried it).
  history("refusal-went-on", "slow", "failed");
  importRunInto(
    seed,
    bed.keys,
    { ...finishedRun("refusal-went-on", "slow", "rebuilt", at + 1_000), id: "refusal-went-on-a2", attempt: 2 },
    DEFAULT_RETENTION,
  );
  await seed.exec();

  const rebuilt = await call("POST", "/api/runs/refusal-done-a1/retry", { reason: "once more" });
  assertError(
    rebuilt,
    409,
    /^not retried: run refusal-done-a1 is rebuilt; only failed, aborted or cancelled runs are retried$/,
    "not-retryable",
  );
  assert.equal(rebuilt.body.status, "not-retryable");
  assert.equal(rebuilt.body.runStatus, "rebuilt");
  // An attempt its job went on from (helper-117: it queued a forced rebuild of an output its job had rebuilt).
  const wentOn = await call("POST", "/api/runs/refusal-went-on-a1/retry", { reason: "once more" });
  assertError(
    wentOn,
    409,
    /^not retried: run refusal-went-on-a1's job went on: its next attempt refusal-went-on-a2 is rebuilt \(retry the job's last attempt if it did not rebuild\)$/,
    "job-went-on",
  );
  assert.equal(wentOn.body.laterRunId, "refusal-went-on-a2");
  const retired = await call("POST", "/api/runs/refusal-retired-a1/retry", { reason: "once more" });
  assertError(retired, 409, /^not retried: .*retired/, "unknown-rebuild");
  assert.equal(retired.body.status, "unknown-rebuild");

  const nightly = bed.definitions.rebuilds.get("nightly")!;
  assert.notEqual(
    await upsertSchedule(
      { queue: bed.queue, client: bed.main, keys: bed.keys, definitions: bed.definitions },
      nightly,
      undefined,
    ),
    "paused",
  );
  const tick = (await bed.queue.getDelayed()).find((job) => job.id?.startsWith("repeat:sched.nightly:"));
  assert.ok(tick?.id, "the schedule's next tick waits in the queue");
  const scheduled = await call("POST", `/api/jobs/${encodeURIComponent(tick.id)}/cancel`, { reason: "not tonight" });
  assertError(
    scheduled,
    409,
    /^not cancelled: job repeat:sched\.nightly:\d+ is a schedule's next tick, not a run yet; pause the schedule instead$/,
    "scheduled-tick",
  );
  assert.equal(scheduled.body.status, "scheduled-tick");
  assert.equal(scheduled.body.jobId, tick.id);
  // Gone from the queue, its run records say how it ended.
  const finished = await call("POST", "/api/jobs/refusal-done/cancel", { reason: "too late" });
  assertError(
    finished,
    409,
    /^nothing to cancel: job refusal-done has ended already \(its last run refusal-done-a1 is rebuilt\)$/,
    "finished",
  );
  assert.equal(finished.body.status, "finished");
  assert.deepEqual(finished.body.lastRun, { id: "refusal-done-a1", status: "rebuilt" });
});

/** Every route file under app/api: its URL (path parameters filled in) and the methods it exports a handler for. */
function apiRoutes(): { route: string; url: string; served: string[] }[] {
  const found: { route: string; url: string; served: string[] }[] = [];
  const walk = (dir: string) => {
    for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
      const full = path.join(dir, entry.name);
      if (entry.isDirectory()) walk(full);
      else if (entry.name === "route.ts") {
        const route = `/${path.relative("app", dir).split(path.sep).join("/")}`;
        const source = fs.readFileSync(full, "utf8");
        const served = [...source.matchAll(/export (?:const|async function|function) (GET|POST|PUT|PATCH|DELETE)\b/g)]
          .map((m) => m[1]!)
          .sort();
        const url = route
          .replace("[...path]", "no-such-route")
          .replace("[name]", "slow")
          .replace("/runs/[id]", "/runs/seed-01-a1")
          .replace("[id]", "run-1");
        found.push({ route, url, served });
      }
    }
  };
  walk("app/api");
  return found;
}

test("a method a route does not serve is a 405 in the error shape with Allow; OPTIONS lists the allowed ones", async () => {
  const routes = apiRoutes();
  assert.ok(routes.length >= 20, `${routes.length} routes`);
  const failures: string[] = [];
  const expect = (ok: boolean, what: string) => void (ok || failures.push(what));
  for (const { route, url, served } of routes) {
    for (const method of ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]) {
      if (served.includes(method) || (method === "HEAD" && served.includes("GET"))) continue;
      const response = await fetch(`${base}${url}`, {
        method,
        headers: { authorization: `Bearer ${OPERATOR_TOKEN}` },
        redirect: "manual",
      });
      const text = await response.text();
      const where = `${method} ${route}: ${response.status} ${JSON.stringify(text.slice(0, 200))}`;
      if (route === "/api/[...path]") {
        // No route there: 404 whatever the method.
        expect(response.status === 404, where);
        if (method !== "HEAD") expect(text.includes('"not-found"'), where);
        continue;
      }
      const allow = [...served, "OPTIONS", ...(served.includes("GET") ? ["HEAD"] : [])].sort().join(", ");
      expect(
        response.headers.get("allow") === allow,
        `${where}; Allow: ${response.headers.get("allow")}, not ${allow}`,
      );
      if (method === "OPTIONS") {
        expect(response.status === 204, where);
        continue;
      }
      expect(response.status === 405, where);
      if (method === "HEAD") continue; // no body
      let body: unknown = null;
      try {
        body = JSON.parse(text);
      } catch {
        // reported below
      }
      expect(
        JSON.stringify(body) ===
          JSON.stringify({
            error: {
              code: "method-not-allowed",
              message: `${method} is not allowed on ${url}; allowed: ${allow}`,
            },
          }),
        where,
      );
    }
  }
  assert.deepEqual(failures, []);
});

test("pages are read with GET and HEAD only: any other method on a page, a multipart POST taken for a server action included, is a 405 in the API's error shape", async () => {
  const failures: string[] = [];
  // `/api/%2e%2e` is `/` once parsed: the fuzzer's case (Next answered 409 with no JSON).
  for (const page of ["/", "/runs", "/rebuilds", "/api/%2e%2e"]) {
    for (const method of ["POST", "PUT", "PATCH", "DELETE"]) {
      const form = new FormData();
      form.append("1_$ACTION_ID_0", "x");
      const response = await fetch(`${base}${page}`, {
        method,
        headers: { authorization: `Bearer ${OPERATOR_TOKEN}`, "next-action": "0".repeat(40) },
        body: form,
        redirect: "manual",
      });
      const text = await response.text();
      let body: { error?: { code?: string; message?: string } } = {};
      try {
        body = JSON.parse(text) as typeof body;
      } catch {
        // reported below
      }
      const where = `${method} ${page}: ${response.status} ${JSON.stringify(text.slice(0, 200))}`;
      if (
        response.status !== 405 ||
        response.headers.get("allow") !== "GET, HEAD" ||
        body.error?.code !== "method-not-allowed" ||
        !body.error.message?.startsWith(`${method} /`)
      ) {
        failures.push(where);
      }
    }
  }
  assert.deepEqual(failures, []);
  // GET still serves the pages.
  const page = await fetch(`${base}/`, { headers: { authorization: `Bearer ${OPERATOR_TOKEN}` }, redirect: "manual" });
  await page.text();
  assert.ok(page.status === 200 || page.status === 307, `GET /: ${page.status}`);
});

test("no Redis key was built from unchecked input", async () => {
  const keys = [...(await bed.main.keys("*")), ...(await bed.claims.keys("*"))]; // a test may list keys
  for (const bad of ["nope", "initech", "..", "etc", "a*b", "x*", "exploded", "garbage", "seed-99"]) {
    assert.ok(!keys.some((k) => k.includes(bad)), `a key contains '${bad}': ${keys.filter((k) => k.includes(bad))}`);
  }
});

test("a published build found changed shows on its rebuild and in the health problems; a weak worker is warned of", async () => {
  const { recordChangedBuild } = await import("../../lib/rebuilds/build-integrity");
  const { beat, newWorkerIdentity, retire } = await import("../../lib/workers/heartbeat");
  const path = `${bed.definitions.rebuilds.get("tenanted")!.outputPath}/acme/builds/${"a".repeat(32)}`;
  await recordChangedBuild(bed.main, bed.keys, {
    path,
    rebuild: "tenanted",
    tenant: "acme",
    expected: "a".repeat(32),
    actual: "b".repeat(32),
    foundAt: Date.now(),
    foundBy: "worker-x",
  });
  const weak = newWorkerIdentity("test", { containment: "process-group" });
  await beat(bed.main, bed.keys, weak, null);
  try {
    const rebuilds = (await call("GET", "/api/rebuilds")).body.rebuilds as {
      name: string;
      tenant: string | null;
      changedBuilds: { path: string }[];
    }[];
    const marked = rebuilds.filter((r) => r.changedBuilds.length > 0).map((r) => [r.name, r.tenant]);
    assert.deepEqual(marked, [["tenanted", "acme"]]);
    const health = (await call("GET", "/api/health")).body as { problems: string[] };
    assert.ok(
      health.problems.some((p) => p.includes("changed on disk") && p.includes(path)),
      health.problems.join("\n"),
    );
    assert.ok(
      health.problems.some((p) => p.includes(weak.id) && p.includes("process group")),
      health.problems.join("\n"),
    );
    const workers = (await call("GET", "/api/workers")).body.workers as { id: string; containment: string }[];
    assert.equal(workers.find((w) => w.id === weak.id)?.containment, "process-group");
    // An anonymous probe gets how many, not what (checks at most 5 s old: poll past that).
    const anonymousProblems = async () =>
      ((await (await fetch(`${base}/api/health`)).json()) as { problems: string[] }).problems;
    await until("an anonymous probe counts them", async () =>
      /^\d+ problem\(s\); log in to see them$/.test((await anonymousProblems())[0] ?? ""),
    );
    const counted = await anonymousProblems();
    assert.equal(counted.length, 1, counted.join("\n"));
    assert.ok(Number(/^(\d+)/.exec(counted[0]!)![1]) >= 2, counted[0]);
  } finally {
    await bed.main.del(bed.keys.changedBuilds);
    await retire(bed.main, bed.keys, weak.id);
  }
});

test("an overlong URL is a 414 in the API's error shape; a trailing slash redirects without echoing more than the URL", async () => {
  // Next's own trailing-slash redirect echoed the URL into Location and Refresh: with a 12 KB
  // query an HTTP client got "Header overflow" and no answer (fuzz-api, FUZZ_SEED=3996531464).
  const long = await call("GET", `/api/.?c=${"A".repeat(6_000)}`);
  assertError(long, 414, /the URL is \d+ characters long; the limit is 4096/);
  const page = await fetch(`${base}/runs?c=${"A".repeat(6_000)}`, { redirect: "manual" });
  assert.equal(page.status, 414);
  const slash = await fetch(`${base}/api/health/?x=1`, { redirect: "manual" });
  assert.equal(slash.status, 308);
  assert.equal(
    new URL(slash.headers.get("location")!, base).pathname + new URL(slash.headers.get("location")!, base).search,
    "/api/health?x=1",
  );
});
