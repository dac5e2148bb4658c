/**
 * Name search and paging of the list APIs (`q` of /api/claims, /api/rebuilds, /api/runs): the
 * query is validated (400 naming the field, in the API's error shape) and returns the right rows,
 * against a real redis-server. Calls lib/api directly with a context of real connections.
 */
import assert from "node:assert/strict";
import { after, test } from "node:test";
import { acquireClaim, claimName } from "../../lib/claims/index";
import { claimsQuery, getClaims } from "../../lib/api/claims";
import { SEARCH_SCAN_MAX } from "../../lib/claims/list";
import { errorResponse } from "../../lib/api/errors";
import { readQuery } from "../../lib/api/input";
import { getRebuildDetail, getRebuildsPage, MAX_DETAIL_TENANTS, rebuildsQuery } from "../../lib/api/rebuilds";
import { getRunDetail, getRuns, runsQuery } from "../../lib/api/runs";
import { parseDefinitions } from "../../lib/rebuilds/definitions";
import { createRedis } from "../../lib/redis/client";
import { redisKeys } from "../../lib/redis/keys";
import { MAX_SEARCHED_REBUILDS } from "../../lib/runs/list";
import { DEFAULT_RETENTION, logDroppedLine, RUN_LOG_LINES } from "../../lib/runs/records";
import { writeRun } from "../../lib/runs/writer";
import type { WebContext } from "../../lib/web/context";
import { beat, newWorkerIdentity } from "../../lib/workers/heartbeat";
import { seedRunInto, writeTestRun } from "../support/runs";
import { startTestRedis, stopTestRedis, uniquePrefix } from "../support/redis";

const server = await startTestRedis();
const main = createRedis(server.url, "worker");
const claims = createRedis(`${server.url}/1`, "worker");
after(async () => {
  main.disconnect();
  claims.disconnect();
  await stopTestRedis(server);
});

const step = [{ name: "s", run: ["true"] }];
/**
 * 60 `fleet-NN` rebuilds (more than one search reads), `tiles`, `archive` with tenants and `crowd`
 * with 30 (more than a rebuild's page shows at once).
 */
function definitions() {
  const rebuilds: Record<string, unknown> = {
    tiles: { output: "/srv/out/tiles", steps: step },
    archive: { output: "/srv/out/archive", tenants: ["acme", "globex", "initech"], steps: step },
  };
  rebuilds.crowd = {
    output: "/srv/out/crowd",
    tenants: Array.from({ length: 30 }, (_, i) => `c${String(i).padStart(2, "0")}`),
    steps: step,
  };
  for (let i = 0; i < 60; i++) {
    rebuilds[`fleet-${String(i).padStart(2, "0")}`] = { output: `/srv/out/fleet-${i}`, steps: step };
  }
  const result = parseDefinitions({ rebuilds }, "/srv/claimwatch.yaml");
  assert.ok(result.ok);
  return result.definitions;
}

function contextFor(prefix: string): WebContext {
  const keys = redisKeys(prefix);
  return {
    definitions: definitions(),
    connections: { keys, main, claims, urls: { main: server.url, claims: `${server.url}/1` }, close: async () => {} },
  } as unknown as WebContext;
}

/** What a route handler answers when `readQuery` refuses the URL. */
async function refusal(query: string, schema: Parameters<typeof readQuery>[1]) {
  let error: unknown;
  try {
    readQuery(`http://x/api/list?${query}`, schema);
  } catch (caught) {
    error = caught;
  }
  assert.ok(error, `${query} should be refused`);
  const response = errorResponse(error);
  return { status: response.status, body: (await response.json()) as { error: { code: string; message: string } } };
}

test("q is validated on every list: empty, too long, control characters → 400 naming q", async () => {
  for (const schema of [claimsQuery, rebuildsQuery, runsQuery]) {
    for (const bad of ["q=", `q=${"a".repeat(101)}`, "q=a%00b", "q=a%0Ab", "q=a&q=b"]) {
      const { status, body } = await refusal(bad, schema);
      assert.equal(status, 400, bad);
      assert.equal(body.error.code, "bad-request");
      assert.match(body.error.message, /^q: /, `${bad}: ${body.error.message}`);
    }
  }
  const { body } = await refusal("cursor=x", rebuildsQuery);
  assert.match(body.error.message, /^cursor: must be a cursor from a previous page/);
  assert.equal(readQuery("http://x/api/claims?q=tenant%3Aacme%3A", claimsQuery).q, "tenant:acme:");
});

test("claims: q is a case-insensitive substring of the name, paged within the search", async () => {
  const context = contextFor(uniquePrefix("search-claims"));
  const { keys } = context.connections;
  const names = [
    claimName("/srv/out/tiles"),
    claimName("/srv/out/tiles-extra"),
    claimName("/srv/out/archive", "acme"),
    claimName("/srv/out/archive", "acmeish"),
    claimName("/srv/out/archive", "globex"),
    claimName("/srv/out/other/acme"),
    claimName("/srv/out/Reports", "ACME-EU"),
  ];
  for (const name of names) {
    const grant = await acquireClaim(claims, keys, name, { workerId: "w" }, { ttlMs: 60_000, refreshEveryMs: 10_000 });
    assert.equal(grant.status, "acquired");
  }
  const search = async (q: string, limit = 100, cursor?: string) =>
    getClaims(context, { limit, q, ...(cursor ? { cursor } : {}) });
  const found = async (q: string) => (await search(q)).claims.map((c) => c.name);

  // Anywhere in the name, whatever the case, in name order.
  assert.deepEqual(await found("acme"), [
    "output:/srv/out/other/acme",
    "tenant:ACME-EU:output:/srv/out/Reports",
    "tenant:acme:output:/srv/out/archive",
    "tenant:acmeish:output:/srv/out/archive",
  ]);
  assert.deepEqual(await found("ACME:"), ["tenant:acme:output:/srv/out/archive"]);
  assert.deepEqual(await found("out/tiles"), ["output:/srv/out/tiles", "output:/srv/out/tiles-extra"]);
  assert.deepEqual(await found("reports"), ["tenant:ACME-EU:output:/srv/out/Reports"]);
  // A prefix still finds what it found before.
  assert.deepEqual(await found("tenant:acme:"), ["tenant:acme:output:/srv/out/archive"]);
  assert.deepEqual(await found("nothing-is-named-like-this"), []);
  assert.deepEqual(await found("tenant:é"), []);

  // Pages of one search stay within it and cover its matches once.
  const first = await search("archive", 1);
  assert.deepEqual(
    first.claims.map((c) => c.name),
    ["tenant:acme:output:/srv/out/archive"],
  );
  const second = await search("archive", 1, first.nextCursor!);
  assert.deepEqual(
    second.claims.map((c) => c.name),
    ["tenant:acmeish:output:/srv/out/archive"],
  );
  const third = await search("archive", 5, second.nextCursor!);
  assert.deepEqual(
    third.claims.map((c) => c.name),
    ["tenant:globex:output:/srv/out/archive"],
  );
  assert.equal(third.nextCursor, null);
});

test("claims: a search reads at most SEARCH_SCAN_MAX names per call, and the next page reads on", async () => {
  const context = contextFor(uniquePrefix("search-claims-many"));
  const { keys } = context.connections;
  // Registry names nobody matches (never read as claims, so never pruned), then one that matches.
  const filler = Array.from({ length: SEARCH_SCAN_MAX + 5 }, (_, i) =>
    claimName(`/srv/out/filler-${String(i).padStart(6, "0")}`),
  );
  await claims.zadd(keys.claimRegistry, ...filler.flatMap((name) => [0, name]));
  const name = claimName("/srv/out/needle");
  assert.equal(
    (await acquireClaim(claims, keys, name, { workerId: "w" }, { ttlMs: 60_000, refreshEveryMs: 10_000 })).status,
    "acquired",
  );
  const first = await getClaims(context, { limit: 10, q: "NEEDLE" });
  assert.deepEqual(first.claims, []);
  assert.equal(first.nextCursor, filler[SEARCH_SCAN_MAX - 1]);
  const second = await getClaims(context, { limit: 10, q: "NEEDLE", cursor: first.nextCursor! });
  assert.deepEqual(
    second.claims.map((c) => c.name),
    [name],
  );
  assert.equal(second.nextCursor, null);
});

test("rebuilds: paged rows, q a case-insensitive substring of rebuild/tenant", async () => {
  const context = contextFor(uniquePrefix("search-rebuilds"));
  const all = await getRebuildsPage(context, { limit: 200 });
  assert.equal(all.total, 94); // tiles, 3 archive tenants, 30 crowd tenants, 60 fleet rebuilds
  assert.equal(all.nextCursor, null);

  // Pages cover every row once, in definitions order.
  const seen: string[] = [];
  let cursor: number | undefined;
  for (;;) {
    const page = await getRebuildsPage(context, { limit: 25, ...(cursor !== undefined ? { cursor } : {}) });
    assert.ok(page.rebuilds.length <= 25);
    seen.push(...page.rebuilds.map((r) => `${r.name}/${r.tenant ?? ""}`));
    if (!page.nextCursor) break;
    cursor = Number(page.nextCursor);
  }
  assert.equal(seen.length, 94);
  assert.equal(new Set(seen).size, 94);
  assert.deepEqual(seen.slice(0, 4), ["tiles/", "archive/acme", "archive/globex", "archive/initech"]);

  const acme = await getRebuildsPage(context, { limit: 50, q: "ACME" });
  assert.deepEqual(
    acme.rebuilds.map((r) => [r.name, r.tenant]),
    [["archive", "acme"]],
  );
  assert.equal(acme.total, 1);
  assert.equal(acme.rebuilds[0]!.claimName, "tenant:acme:output:/srv/out/archive");
  assert.equal(acme.rebuilds[0]!.tenantCount, 3);

  const tenantsOfArchive = await getRebuildsPage(context, { limit: 50, q: "archive/" });
  assert.deepEqual(
    tenantsOfArchive.rebuilds.map((r) => r.tenant),
    ["acme", "globex", "initech"],
  );

  const fleet = await getRebuildsPage(context, { limit: 10, q: "fleet-1" });
  assert.equal(fleet.total, 10);
  assert.equal(fleet.nextCursor, null);
  assert.ok(fleet.rebuilds.every((r) => r.name.startsWith("fleet-1")));

  const none = await getRebuildsPage(context, { limit: 50, q: "no-such" });
  assert.deepEqual(none, { rebuilds: [], nextCursor: null, total: 0 });
  // A cursor past the end is an empty last page, not an error.
  assert.deepEqual((await getRebuildsPage(context, { limit: 50, cursor: 500 })).rebuilds, []);
});

test("a rebuild's page shows at most MAX_DETAIL_TENANTS tenants and says how many exist", async () => {
  const context = contextFor(uniquePrefix("search-detail"));
  const crowd = await getRebuildDetail(context, "crowd", undefined);
  assert.equal(crowd.entries.length, MAX_DETAIL_TENANTS);
  assert.equal(crowd.entriesTotal, 30);
  assert.equal(crowd.entries[0]!.tenant, "c00");
  const one = await getRebuildDetail(context, "crowd", "c29");
  assert.deepEqual(
    one.entries.map((e) => e.tenant),
    ["c29"],
  );
  assert.equal(one.entriesTotal, 1);
  const archive = await getRebuildDetail(context, "archive", undefined);
  assert.equal(archive.entries.length, 3);
  assert.equal(archive.entriesTotal, 3);
});

test("rebuilds: a row's live state comes with the page (recent runs, claim, skips)", async () => {
  const context = contextFor(uniquePrefix("search-rebuild-state"));
  const { keys } = context.connections;
  const now = Date.now();
  const tx = main.multi();
  for (let i = 0; i < 3; i++) {
    seedRunInto(tx, keys, {
      id: `acme-${i}-a1`,
      rebuild: "archive",
      tenant: "acme",
      createdAt: now - 10_000 + i,
      startedAt: now - 10_000 + i + 5,
      status: "rebuilt",
    });
  }
  // Deferred behind the newest build's claim, later: started nothing, so it is not the last run.
  seedRunInto(tx, keys, {
    id: "acme-3-a2",
    rebuild: "archive",
    tenant: "acme",
    createdAt: now - 5_000,
    startedAt: now - 4_000,
    status: "deferred",
  });
  await tx.exec();
  await acquireClaim(
    claims,
    keys,
    claimName("/srv/out/archive", "globex"),
    { workerId: "w1" },
    { ttlMs: 60_000, refreshEveryMs: 10_000 },
  );
  const page = await getRebuildsPage(context, { limit: 10, q: "archive" });
  const acme = page.rebuilds.find((r) => r.tenant === "acme")!;
  const globex = page.rebuilds.find((r) => r.tenant === "globex")!;
  assert.deepEqual(
    acme.recentRuns.map((r) => r.id),
    ["acme-0-a1", "acme-1-a1", "acme-2-a1", "acme-3-a2"],
  );
  assert.equal(acme.lastRun?.id, "acme-2-a1");
  assert.equal(acme.claim, null);
  assert.equal(globex.recentRuns.length, 0);
  assert.equal(globex.claim?.holder.workerId, "w1");
});

test("runs: q finds the runs of every rebuild whose name matches, newest first, paged", async () => {
  const context = contextFor(uniquePrefix("search-runs"));
  const { keys } = context.connections;
  const now = Date.now();
  const tx = main.multi();
  // 4 runs each of fleet-10 … fleet-19 (interleaved in time), plus tiles and archive runs.
  let n = 0;
  for (let i = 0; i < 4; i++) {
    for (let f = 10; f < 20; f++) {
      seedRunInto(tx, keys, {
        id: `f${f}-${i}-a1`,
        rebuild: `fleet-${f}`,
        tenant: null,
        createdAt: now - 100_000 + n++ * 10,
        status: f % 2 ? "failed" : "rebuilt",
      });
    }
  }
  seedRunInto(tx, keys, { id: "tiles-0-a1", rebuild: "tiles", tenant: null, createdAt: now, status: "rebuilt" });
  seedRunInto(tx, keys, { id: "arch-0-a1", rebuild: "archive", tenant: "acme", createdAt: now, status: "rebuilt" });
  await tx.exec();

  const query = (extra: Record<string, string>) =>
    getRuns(context, readQuery(`http://x/api/runs?${new URLSearchParams(extra)}`, runsQuery));

  const walked: string[] = [];
  let cursor: string | null = null;
  let pages = 0;
  do {
    const page = await query({ q: "FLEET-1", limit: "7", ...(cursor ? { cursor } : {}) });
    assert.deepEqual(page.search, { matched: 10, searched: 10 });
    walked.push(...page.runs.map((r) => r.id));
    cursor = page.nextCursor;
    pages += 1;
  } while (cursor && pages < 20);
  assert.equal(walked.length, 40);
  assert.equal(new Set(walked).size, 40);
  // Newest first across the merged indexes: the order they were created in, reversed.
  const created = [];
  for (let i = 0; i < 4; i++) for (let f = 10; f < 20; f++) created.push(`f${f}-${i}-a1`);
  assert.deepEqual(walked, created.reverse());

  const failed = await query({ q: "fleet-1", status: "failed", limit: "50" });
  assert.equal(failed.runs.length, 20);
  assert.ok(failed.runs.every((r) => r.status === "failed" && r.rebuild.startsWith("fleet-1")));

  const exact = await query({ q: "tiles" });
  assert.deepEqual(
    exact.runs.map((r) => r.id),
    ["tiles-0-a1"],
  );

  // More rebuilds match than one search reads: the first ones by name, and the page says so.
  const broad = await query({ q: "fleet" });
  assert.deepEqual(broad.search, { matched: 60, searched: MAX_SEARCHED_REBUILDS });

  const none = await query({ q: "no-such-rebuild" });
  assert.deepEqual(none, { runs: [], nextCursor: null, search: { matched: 0, searched: 0 } });

  // q replaces the rebuild filter; both at once is refused, naming q.
  await assert.rejects(query({ q: "fleet", rebuild: "tiles" }), /^ApiError: q: give either q or rebuild/);
  await assert.rejects(query({ q: "fleet", tenant: "acme" }), /^ApiError: tenant: /);
});

test("rebuilds: a claim whose holder stopped beating is stale on the rebuild's row, as on the Claims page", async () => {
  const context = contextFor(uniquePrefix("stale-rows"));
  const { keys } = context.connections;
  const name = claimName("/srv/out/tiles");
  const timing = { ttlMs: 120_000, refreshEveryMs: 30_000 };
  const silent = await acquireClaim(claims, keys, name, { rebuild: "tiles", workerId: "paused-worker" }, timing);
  assert.equal(silent.status, "acquired");
  const row = async () => (await getRebuildsPage(context, { limit: 1, q: "tiles" })).rebuilds[0]!;
  const held = (await row()).claim;
  assert.ok(held, "the row shows the claim");
  assert.equal(held.stale, true, "its holder has no heartbeat: stale");
  assert.match(held.staleReason ?? "", /no live heartbeat/);
  // The same holder beating: live.
  const worker = { ...newWorkerIdentity("test"), id: "paused-worker" };
  await beat(main, keys, worker, null);
  assert.equal((await row()).claim?.stale, false);
});

test("a run in flight whose worker stopped beating says so on its page; one whose worker beats does not", async () => {
  const context = contextFor(uniquePrefix("silent-run"));
  const { keys } = context.connections;
  const now = Date.now();
  await writeTestRun(main, keys, {
    id: "run-silent-a1",
    jobId: "run-silent",
    rebuild: "tiles",
    tenant: null,
    status: "running",
    workerId: "stopped-worker",
    createdAt: now,
    startedAt: now,
  });
  const lastBeat = now - 60_000;
  await main.zadd(keys.workerRegistry, lastBeat, "stopped-worker");
  assert.equal((await getRunDetail(context, "run-silent-a1")).workerSilentSince, lastBeat);
  await beat(main, keys, { ...newWorkerIdentity("test"), id: "stopped-worker" }, "run-silent");
  assert.equal((await getRunDetail(context, "run-silent-a1")).workerSilentSince, null, "beating again");
});

test("a run's page shows every log line the run log keeps: the newest after the line that counts the dropped ones", async () => {
  const context = contextFor(uniquePrefix("long-log"));
  const { keys } = context.connections;
  const now = Date.now();
  await writeTestRun(main, keys, {
    id: "run-chatty-a1",
    jobId: "run-chatty",
    rebuild: "tiles",
    tenant: null,
    status: "running",
    createdAt: now,
    startedAt: now,
  });
  const lines = Array.from({ length: 1_801 }, (_, i) => `line ${i + 1}`);
  const store = { client: main, keys, retention: DEFAULT_RETENTION };
  for (let i = 0; i < lines.length; i += 300) {
    await writeRun(
      store,
      { rebuild: "tiles", tenant: null, runId: "run-chatty-a1", jobId: "run-chatty" },
      {
        logLines: lines.slice(i, i + 300),
      },
    );
  }
  const { log } = await getRunDetail(context, "run-chatty-a1");
  assert.equal(log.length, RUN_LOG_LINES);
  assert.equal(log[0], logDroppedLine(1_801 - (RUN_LOG_LINES - 1)));
  assert.deepEqual([log[1], log.at(-1)], [`line ${1_801 - RUN_LOG_LINES + 2}`, "line 1801"]);
});
