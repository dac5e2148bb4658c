/**
 * Issue 14, defect 6: a rebuilt version is marked rebuilt (its idempotency key) before the claim
 * is released, so a duplicate that acquires the freed claim finds the key and skips instead of
 * building again. Watched with MONITOR on the real Redis: the order the server executed them.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { claimName } from "../../lib/claims";
import { createRedis } from "../../lib/redis/client";
import { runRebuild, type RebuildDeps } from "../../lib/rebuilds/run-rebuild";
import { idempotencyKey } from "../../lib/rebuilds/version";
import { newWorkerIdentity } from "../../lib/workers/heartbeat";
import { createTestBed, type TestBed } from "../support/stack";

let bed: TestBed;
let deps: RebuildDeps;
before(async () => {
  bed = await createTestBed({
    quick: {
      output: "out/quick",
      claim: { ttl: "4s", refreshEvery: "1s" },
      steps: [{ name: "write", run: ["sh", "-c", 'echo "$CLAIMWATCH_VERSION" > "$CLAIMWATCH_WORK/v"'] }],
    },
  });
  deps = {
    main: bed.main,
    claims: bed.claims,
    keys: bed.keys,
    definitions: bed.definitions,
    worker: newWorkerIdentity("test"),
  };
});
after(() => bed.close());

test("the idempotency key is set before the claim is released", async () => {
  const monitorClient = createRedis(bed.redis.url, "worker", "test-monitor");
  const monitor = await monitorClient.monitor();
  const seen: string[][] = [];
  monitor.on("monitor", (_time: string, args: string[]) => seen.push(args.map(String)));
  try {
    const outcome = await runRebuild(deps, {
      id: "order-1",
      attempt: 1,
      createdAt: Date.now(),
      data: { rebuild: "quick", version: "o1", trigger: "api" },
      signal: new AbortController().signal,
    });
    assert.equal(outcome.status, "rebuilt");
    const idem = bed.keys.idempotency(idempotencyKey("quick", undefined, "o1"));
    const claim = bed.keys.claim(claimName(bed.definitions.rebuilds.get("quick")!.claimPath));
    // MONITOR also lists what scripts run: the release script's DEL of the claim, the run
    // script's (or a plain) SET of the idempotency key.
    const released = () => seen.findIndex((args) => args[0]?.toLowerCase() === "del" && args[1] === claim);
    // MONITOR lines arrive a little after the commands ran: wait until the release was seen.
    for (let i = 0; i < 200 && released() < 0; i++) await new Promise((r) => setTimeout(r, 25));
    const marked = seen.findIndex((args) => args[0]?.toLowerCase() === "set" && args[1] === idem);
    assert.ok(released() >= 0, "the release was seen");
    assert.ok(marked >= 0, "the idempotency key was set");
    assert.ok(marked < released(), `key set at command ${marked}, claim released at ${released()}`);
  } finally {
    monitor.disconnect();
    monitorClient.disconnect();
  }
});
