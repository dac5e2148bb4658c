/**
 * Issue 14, defect 6: a rebuilt version is marked rebuilt (its idempotency key) before the claim
 * is released, so a duplicate that acquires the freed claim finds the key and skips instead of
 * building again. Watched with MONITOR on the real Redis: the order the server executed them.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { after, before, test } from "node:test";
import { acquireClaim, claimName, releaseClaim } from "../../lib/claims";
import { PRUNING_VERSION } from "../../lib/rebuilds/prune";
import { readRun } from "../../lib/runs/records";
import { runRebuild, type RebuildDeps } from "../../lib/rebuilds/run-rebuild";
import { idempotencyKey } from "../../lib/rebuilds/version";
import { createTestBed, rebuildDepsOf, type TestBed } from "../support/stack";

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
  deps = rebuildDepsOf(bed);
});
after(() => bed.close());

/**
 * MONITOR through `redis-cli` (a process of its own, stopped by PID): ioredis's monitor mode
 * once mistook a monitor line for a reply ("Command queue state error") in CI.
 */
async function startMonitor(url: string): Promise<{ seen: string[][]; stop: () => void }> {
  const { hostname, port } = new URL(url);
  const child = spawn("redis-cli", ["-h", hostname, "-p", port, "monitor"], { stdio: ["ignore", "pipe", "pipe"] });
  const seen: string[][] = [];
  let rest = "";
  let ready: () => void = () => {};
  const started = new Promise<void>((resolve) => (ready = resolve));
  child.stdout.setEncoding("utf8");
  child.stdout.on("data", (chunk: string) => {
    const lines = (rest + chunk).split("\n");
    rest = lines.pop() ?? "";
    for (const line of lines) {
      if (line.trim() === "OK") ready();
      // 1796186097.236051 [0 127.0.0.1:41770] "set" "key" "value"
      const args = [...line.matchAll(/"((?:[^"\\]|\\.)*)"/g)].map((m) => m[1]!);
      if (args.length > 0) seen.push(args);
    }
  });
  await started;
  return { seen, stop: () => child.kill("SIGKILL") };
}

test("the idempotency key is set before the claim is released", async () => {
  const { seen, stop } = await startMonitor(bed.redis.url);
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
    stop();
  }
});

test("the re-check is asked once the claim is granted: a run that finished while this one waited for the claim is found, nothing is built", async () => {
  const definition = bed.definitions.rebuilds.get("quick")!;
  const name = claimName(definition.claimPath);
  const idem = bed.keys.idempotency(idempotencyKey("quick", undefined, "o2"));
  // "Another run" holds the claim (as a pruner: this attempt waits for it instead of deferring).
  const other = await acquireClaim(
    bed.claims,
    bed.keys,
    name,
    { workerId: "w-other", version: PRUNING_VERSION, trail: false },
    { ttlMs: 10_000, refreshEveryMs: 2_000 },
  );
  assert.equal(other.status, "acquired");
  if (other.status !== "acquired") return;
  const attempt = runRebuild(deps, {
    id: "order-2",
    attempt: 1,
    createdAt: Date.now(),
    data: { rebuild: "quick", version: "o2", trigger: "api" },
    signal: new AbortController().signal,
  });
  // This attempt's record began (no key yet: it is running) and it waits for the claim ...
  for (let i = 0; i < 200 && (await readRun(bed.main, bed.keys, "order-2-a1"))?.status !== "running"; i++) {
    await new Promise((r) => setTimeout(r, 10));
  }
  assert.equal((await readRun(bed.main, bed.keys, "order-2-a1"))?.status, "running");
  await new Promise((r) => setTimeout(r, 100));
  // ... while the other run marks the version rebuilt, then releases the claim.
  await bed.main.set(idem, "finished-elsewhere-a1", "PX", 60_000);
  assert.equal((await releaseClaim(bed.claims, bed.keys, name, other.token)).status, "released");
  const outcome = await attempt;
  assert.equal(outcome.status, "skipped");
  const record = await readRun(bed.main, bed.keys, "order-2-a1");
  assert.equal(record?.status, "skipped");
  assert.match(record?.reason ?? "", /already rebuilt by run finished-elsewhere-a1/);
  assert.equal(record?.buildHash ?? null, null, "nothing was built");
});
