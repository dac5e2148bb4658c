/**
 * An operator's action re-reads what it changed and nothing more (issue 13: "a mutation
 * invalidates what it changed, not everything"): with one query of every kind in a real
 * QueryClient, each action leaves exactly its own keys invalidated. And every page of the audit
 * log follows a change (a linked entry's page too, not only the newest).
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { QueryClient } from "@tanstack/react-query";
import { LiveCache } from "../../lib/ui/live-cache";
import { changedBy, queryKeys, rereadChanged, type OperatorChange } from "../../lib/ui/queries";

/** One query of each kind a dashboard page holds, by a name for the assertions. */
const QUERIES = {
  health: queryKeys.health(),
  claimsPage: queryKeys.claims.page(null),
  claimTrail: queryKeys.claims.trail("tiles"),
  endedClaims: queryKeys.claims.ended(),
  rebuildsPage: queryKeys.rebuilds.page(null, ""),
  rebuildDetail: queryKeys.rebuilds.detail("tiles", null),
  preview: queryKeys.rebuilds.preview("tiles", null, "", false),
  queue: queryKeys.queue.list({}),
  runsList: queryKeys.runs.list({ rebuild: "tiles" }),
  runDetail: queryKeys.runs.detail("job-1-a1"),
  timeline: queryKeys.timeline.window("24h", null),
  workers: queryKeys.workers(),
  auditNewest: queryKeys.audit.page(null),
  auditLinked: queryKeys.audit.page("1700000000000-0"),
  alerts: queryKeys.alerts(),
};
type QueryName = keyof typeof QUERIES;

function filledClient(): QueryClient {
  const client = new QueryClient();
  for (const key of Object.values(QUERIES)) client.setQueryData(key, { filled: true });
  return client;
}

const invalidated = (client: QueryClient): QueryName[] =>
  (Object.keys(QUERIES) as QueryName[]).filter((name) => client.getQueryState(QUERIES[name])?.isInvalidated).sort();

const EXPECTED: Record<OperatorChange, QueryName[]> = {
  queuedRun: [
    "auditLinked",
    "auditNewest",
    "preview",
    "queue",
    "rebuildDetail",
    "rebuildsPage",
    "runDetail",
    "runsList",
  ],
  cancel: ["auditLinked", "auditNewest", "preview", "queue", "rebuildDetail", "rebuildsPage", "runDetail", "runsList"],
  forceRelease: [
    "auditLinked",
    "auditNewest",
    "claimTrail",
    "claimsPage",
    "endedClaims",
    "preview",
    "rebuildDetail",
    "rebuildsPage",
  ],
  schedule: ["auditLinked", "auditNewest", "preview", "queue", "rebuildDetail", "rebuildsPage"],
};

test("each operator action re-reads its own queries, never the workers, health, alerts or timeline", () => {
  assert.deepEqual(Object.keys(EXPECTED).sort(), Object.keys(changedBy).sort());
  for (const change of Object.keys(changedBy) as OperatorChange[]) {
    const client = filledClient();
    rereadChanged(client, change);
    assert.deepEqual(invalidated(client), EXPECTED[change].slice().sort(), change);
    client.clear();
  }
});

test("a live event that changes the audit log re-reads every page of it, a linked entry's too", async () => {
  const client = filledClient();
  new LiveCache(client).apply({ type: "run.queued", jobId: "job-2", rebuild: "tiles", tenant: null, at: 1 });
  await new Promise((resolve) => setTimeout(resolve, 300)); // past the cache's coalescing window
  const names = invalidated(client);
  assert.ok(names.includes("auditNewest"), names.join(","));
  assert.ok(names.includes("auditLinked"), names.join(","));
  client.clear();
});
