/**
 * Issue 14, defect 1: a force release must never cost a requested version. A real worker builds
 * version b1; an operator force-releases its claim and another job (version a1, played by this
 * test with one acquire) takes the output. Whether the worker learns of it from a refresh or from
 * its refused publish, b1's job must not end: it is deferred and rebuilt once the output is free.
 * And the other job gets the output only once the worker has stopped b1's step and acknowledged
 * the release: never while b1's step may still write.
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { after, before, test } from "node:test";
import { acquireClaim, claimName, forceReleaseClaim, readClaim, releaseClaim, readPublished } from "../../lib/claims";
import { releaseClaimAsOperator } from "../../lib/api/claims";
import { DEFAULT_RETENTION, readRun, readRunLog, runPlaceOf } from "../../lib/runs/records";
import { isFinalStatus } from "../../lib/runs/transitions";
import { runIdOf } from "../../lib/runs/types";
import { beginAttempt } from "../../lib/runs/writer";
import type { WebContext } from "../../lib/web/context";
import { pidsWithMarker } from "../support/markers";
import { createTestBed, type TestBed } from "../support/stack";
import { until } from "../support/until";

let bed: TestBed;
before(async () => {
  bed = await createTestBed({
    gated: {
      output: "out/gated",
      claim: { ttl: "4s", refreshEvery: "1s" },
      timeLimit: "2m",
      // One attempt: a retry would hide a dropped request behind BullMQ's attempts.
      retries: { attempts: 1, backoff: "200ms", maxBackoff: "1s" },
      steps: [
        {
          name: "gate",
          // Says it started, then waits for {output}/go-<version>, printing a tick every 0.5 s.
          run: [
            "sh",
            "-c",
            'touch "$0/started-$CLAIMWATCH_VERSION"; i=0; while [ ! -f "$0/go-$CLAIMWATCH_VERSION" ]; do sleep 0.05; i=$((i+1)); [ $((i % 10)) -eq 0 ] && echo "tick $i"; done; echo "$CLAIMWATCH_VERSION" > "$CLAIMWATCH_WORK/v"',
            "{output}",
          ],
          killGrace: "1s",
        },
      ],
    },
  });
  fs.mkdirSync(outputDir(), { recursive: true });
});
after(() => bed.close());

const outputDir = () => bed.definitions.rebuilds.get("gated")!.outputPath;
const claim = () => claimName(bed.definitions.rebuilds.get("gated")!.claimPath);

/** The claim held for `version`, once its step runs (it touched `started-<version>`). */
async function claimOnceStepRuns(version: string) {
  const held = await until(`the claim held for ${version}`, async () => {
    const info = await readClaim(bed.claims, bed.keys, claim());
    return info?.holder.version === version ? info : null;
  });
  await until(`the step of ${version} running`, async () =>
    fs.existsSync(path.join(outputDir(), `started-${version}`)),
  );
  return held;
}

/** An operator's force release of `token`'s claim (the token the Claims page showed). */
async function forceRelease(token: string, actor: string, reason: string): Promise<void> {
  const released = await forceReleaseClaim({ claims: bed.claims, audit: bed.main }, bed.keys, {
    name: claim(),
    token,
    actor,
    reason,
  });
  assert.equal(released.status, "released");
}

/**
 * Force-releases b1's live claim (the token the operator was shown) and lets "job A" take the
 * output — which it can only once the worker acknowledged. `meanwhile` runs between the two.
 */
async function forceReleaseAndTakeOutput(
  version: string,
  otherJob: string,
  meanwhile: () => void = () => {},
): Promise<string> {
  const held = await claimOnceStepRuns(version);
  await forceRelease(held.token, "test-operator", "looked dead");
  const acquireOther = () =>
    acquireClaim(
      bed.claims,
      bed.keys,
      claim(),
      { jobId: otherJob, version: "a1", rebuild: "gated", workerId: "other-worker" },
      { ttlMs: 120_000, refreshEveryMs: 1_000 },
    );
  assert.equal((await acquireOther()).status, "held", "the output stays taken while b1's step may still run");
  meanwhile();
  const other = await until("the output free for the other job (the worker acknowledged)", async () => {
    const grant = await acquireOther();
    if (grant.status !== "acquired") return null;
    // Acknowledged only after b1's step stopped: no process of it is left to write.
    assert.deepEqual(pidsWithMarker({ name: "CLAIMWATCH_VERSION", value: version }), [], `${version}'s step processes`);
    return grant;
  });
  return other.token;
}

async function assertRebuiltInTheEnd(jobId: string, version: string, otherToken: string): Promise<string> {
  // The first attempt ends (however), then the other holder finishes and the output is free.
  const first = await until("the first attempt's final record", async () => {
    const runs = await bed.runsOfJob(jobId);
    return runs[0] && isFinalStatus(runs[0].status) ? runs[0] : null;
  });
  assert.notEqual(first.status, "rebuilt", "the first attempt cannot have published under a lost claim");
  await releaseClaim(bed.claims, bed.keys, claim(), otherToken);
  fs.writeFileSync(path.join(outputDir(), `go-${version}`), "");
  const rebuilt = await bed.waitForRun(
    (r) => r.jobId === jobId && r.status === "rebuilt",
    90_000,
    `a rebuilt run of job ${jobId} (first attempt ended ${first.status}: ${first.reason})`,
  );
  assert.equal(rebuilt.version, version);
  const published = await readPublished(bed.claims, bed.keys, claim());
  assert.equal(published?.value, rebuilt.buildHash);
  for (const run of await bed.runsOfJob(jobId)) {
    assert.ok(
      ["deferred", "rebuilt"].includes(run.status),
      `attempt ${run.attempt} ended ${run.status}: ${run.reason}`,
    );
  }
  return first.reason ?? "";
}

test("a force release noticed by a refresh defers the job; the version is rebuilt later", async (t) => {
  const worker = await bed.startWorker();
  try {
    const jobId = await bed.trigger("gated", { version: "b1" });
    const otherToken = await forceReleaseAndTakeOutput("b1", "job-a-1");
    const reason = await assertRebuiltInTheEnd(jobId, "b1", otherToken);
    t.diagnostic(`first attempt: ${reason}`);
    // The aborted attempt names the release: who and why (from the claim trail).
    assert.match(reason, /force-released it \(by test-operator: “looked dead”/);
  } finally {
    await worker.stop();
  }
});

test("a force release noticed only by the refused publish defers the job; the version is rebuilt later", async (t) => {
  const worker = await bed.startWorker();
  try {
    const jobId = await bed.trigger("gated", { version: "b2" });
    // The step ends at once: the holder reaches its publish before its next refresh, usually.
    const otherToken = await forceReleaseAndTakeOutput("b2", "job-a-2", () =>
      fs.writeFileSync(path.join(outputDir(), "go-b2"), ""),
    );
    t.diagnostic(`first attempt: ${await assertRebuiltInTheEnd(jobId, "b2", otherToken)}`);
  } finally {
    await worker.stop();
  }
});

test("an operator's force release of a holder that never answers (paused, dead): its run record names the release, and so does the reason of whoever closes it", async () => {
  const jobId = "force-release-unanswered";
  const store = { client: bed.main, keys: bed.keys, retention: DEFAULT_RETENTION };
  const identity = (attempt: number) => ({
    ...runPlaceOf("gated", undefined),
    runId: runIdOf(jobId, attempt),
    jobId,
    attempt,
    previousRunId: attempt > 1 ? runIdOf(jobId, attempt - 1) : null,
    rebuildName: "gated",
    createdAt: Date.now(),
    trigger: "api" as const,
    workerId: attempt === 1 ? "paused-worker" : "next-worker", // no heartbeat: it stopped beating
    host: "h",
  });
  assert.equal((await beginAttempt(store, identity(1), { mode: { kind: "running" } })).status, "began");
  const grant = await acquireClaim(
    bed.claims,
    bed.keys,
    claim(),
    { jobId, runId: runIdOf(jobId, 1), version: "p1", rebuild: "gated", workerId: "paused-worker" },
    { ttlMs: 60_000, refreshEveryMs: 1_000 },
  );
  assert.equal(grant.status, "acquired");
  if (grant.status !== "acquired") return;
  const context = {
    connections: { main: bed.main, claims: bed.claims, keys: bed.keys },
    definitions: bed.definitions,
  } as unknown as WebContext;
  try {
    const released = await releaseClaimAsOperator(
      context,
      { name: claim(), token: grant.token, reason: "looked stuck" },
      "night-operator",
    );
    assert.equal(released.status, "released");
    const auditId = (released as { auditId: string }).auditId;
    const log = await readRunLog(bed.main, bed.keys, runIdOf(jobId, 1));
    assert.ok(
      log.some((line) =>
        line.endsWith(`claim force-released by night-operator: “looked stuck”; audit entry ${auditId}`),
      ),
      log.join("\n"),
    );
    // The holder never answers; the job's next attempt closes its record.
    assert.equal((await beginAttempt(store, identity(2), { mode: { kind: "running" } })).status, "began");
    const record = await readRun(bed.main, bed.keys, runIdOf(jobId, 1));
    assert.equal(record?.status, "aborted");
    assert.match(
      record?.reason ?? "",
      new RegExp(
        `^an operator force-released its claim \\(by night-operator: “looked stuck”; audit entry ${auditId}\\); worker died or stalled`,
      ),
    );
  } finally {
    await releaseClaim(bed.claims, bed.keys, claim(), grant.token).catch(() => {});
  }
});

test("a holder SIGSTOPped mid-step and force-released meanwhile: its record names the release and the step warden's kill, and the step ends at the kill", async () => {
  const worker = await bed.startWorker();
  const version = "w1";
  try {
    const jobId = await bed.trigger("gated", { version });
    const held = await claimOnceStepRuns(version);
    process.kill(worker.pid, "SIGSTOP");
    const stoppedAt = Date.now();
    let resumedAt = 0;
    try {
      // The warden kills the step after 3 s of the worker's silence.
      await until(
        "the step killed while the worker stands still",
        async () => pidsWithMarker({ name: "CLAIMWATCH_VERSION", value: version }).length === 0,
        30_000,
      );
      await forceRelease(held.token, "night-operator", "looked stuck");
      await new Promise((r) => setTimeout(r, Math.max(0, stoppedAt + 9_000 - Date.now())));
    } finally {
      resumedAt = Date.now();
      process.kill(worker.pid, "SIGCONT");
    }
    const first = await until("the first attempt's final record", async () => {
      const runs = await bed.runsOfJob(jobId);
      return runs[0] && isFinalStatus(runs[0].status) ? runs[0] : null;
    });
    assert.notEqual(first.status, "rebuilt");
    assert.match(
      first.reason ?? "",
      /killed by the step warden: the worker did not run for \d+ ms/,
      first.reason ?? "",
    );
    // Whether it woke to its own deadline or to a refresh that found the release (helper-133).
    assert.match(first.reason ?? "", /force-released it( meanwhile)? \(by night-operator: “looked stuck”/);
    // The ticks the step printed during the pause were read after it: the log says they may have
    // been written then, before it stamps them (black-box helper-182 read them as written after
    // the release); and an abort seen after the warden's kill does not read as a kill of a step
    // that ran until then.
    const log = await readRunLog(bed.main, bed.keys, first.id);
    const marker = log.findIndex((line) =>
      /\[gate\] this worker did not run for \d+ ms: the output below may have been written during that time/.test(line),
    );
    assert.ok(marker >= 0, log.join("\n"));
    assert.ok(
      log.slice(marker + 1).some((line) => /\[gate\] tick \d+$/.test(line)),
      log.join("\n"),
    );
    for (const line of log.filter((l) => /\[gate\] aborting:/.test(l)))
      assert.match(line, /the step warden killed it already|the step warden may have killed it then/, log.join("\n"));
    const gate = first.steps.find((step) => step.name === "gate");
    assert.ok(gate?.finishedAt, JSON.stringify(first.steps));
    // It ended at the kill (≈ 3 s into the pause), not when the worker ran again to see it.
    assert.ok(
      gate.finishedAt < resumedAt - 3_000,
      `step ended ${gate.finishedAt - stoppedAt} ms after the pause began; the worker resumed ${resumedAt - stoppedAt} ms after it`,
    );
    // The request is kept: the version is built once the gate opens.
    fs.writeFileSync(path.join(outputDir(), `go-${version}`), "");
    await bed.waitForRun((r) => r.jobId === jobId && r.status === "rebuilt", 90_000, "w1 rebuilt in the end");
  } finally {
    await worker.stop();
  }
});
