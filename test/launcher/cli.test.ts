/**
 * The `claimwatch` CLI as an operator runs it: real child processes (bin/claimwatch.mjs) against
 * a real Redis and a real worker. Every command's `--json` is parsed; mutations leave audit
 * entries naming the operator; errors list the valid names; the embedded Redis is found through
 * CLAIMWATCH_DATA_DIR, and when it is not, the message says where it looked.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { listAudit, type AuditEntry } from "../../lib/audit";
import type { QueueView } from "../../lib/operations/queue-view";
import { schedulerIdOf } from "../../lib/rebuilds/queue";
import { readSchedulePause } from "../../lib/rebuilds/schedules";
import { freePort } from "../../lib/redis/embedded";
import { createTestBed, slowStep, type TestBed, type TestWorker } from "../support/stack";

const OPERATOR_TOKEN = "cli-test-operator-token-0123456789";
const VIEWER_TOKEN = "cli-test-viewer-token-0123456789ab";
const ACTOR = "tester (operator) via cli";
/** The bed's rebuilds, in the order every "unknown rebuild" message lists them. */
const REBUILDS = "slow, tenanted, cancellable, nightly";

let bed: TestBed;
let worker: TestWorker;
let operatorEnv: NodeJS.ProcessEnv;
const scratch = fs.mkdtempSync(path.join(os.tmpdir(), "claimwatch-cli-"));

before(async () => {
  bed = await createTestBed({
    // Holds its claim until the release test aborts it (no retry after that): long enough for the
    // tests before it on a busy machine, where each CLI start can take seconds.
    slow: { output: "out/slow", steps: [slowStep(1800)], retries: { attempts: 1 } },
    tenanted: { output: "out/tenanted", tenants: ["acme", "globex"], steps: [{ name: "s", run: ["true"] }] },
    // Retried quickly if it fails: a cancelled run must not be (its job fails for good instead).
    cancellable: { output: "out/cancellable", steps: [slowStep(120)], retries: { attempts: 3, backoff: "1s" } },
    // Scheduled once a year: its scheduler's next tick waits in the queue for the whole test.
    nightly: {
      output: "out/nightly",
      schedule: { cron: "0 3 1 1 *", tz: "UTC" },
      steps: [{ name: "s", run: ["true"] }],
    },
  });
  operatorEnv = {
    ...bed.env,
    CLAIMWATCH_OPERATOR_TOKEN: `tester:${OPERATOR_TOKEN}`,
    CLAIMWATCH_VIEWER_TOKEN: `watcher:${VIEWER_TOKEN}`,
    CLAIMWATCH_TOKEN: OPERATOR_TOKEN,
  };
  worker = await bed.startWorker();
});
after(async () => {
  // SIGTERM first: the worker stops its steps (killGrace) before the bed SIGKILLs what is left.
  await worker?.stop("SIGTERM");
  await bed?.close();
  fs.rmSync(scratch, { recursive: true, force: true });
});

interface CliResult {
  status: number | null;
  stdout: string;
  stderr: string;
}

function run(command: string, args: string[], env: NodeJS.ProcessEnv): Promise<CliResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { env, stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
    const timer = setTimeout(() => child.kill("SIGKILL"), 60_000);
    child.once("error", reject);
    child.once("close", (status) => {
      clearTimeout(timer);
      resolve({ status, stdout, stderr });
    });
  });
}

const cli = (args: string[], env: NodeJS.ProcessEnv = operatorEnv) =>
  run(process.execPath, ["bin/claimwatch.mjs", ...args], env);

/** Runs with `--json` and parses stdout, which must be exactly one JSON document. */
async function cliJson<T = Record<string, unknown>>(
  args: string[],
  expectedStatus: number,
  env?: NodeJS.ProcessEnv,
): Promise<{ body: T; stderr: string }> {
  const result = await cli([...args, "--json"], env);
  assert.equal(
    result.status,
    expectedStatus,
    `exit ${result.status}\nstdout: ${result.stdout}\nstderr: ${result.stderr}`,
  );
  let body: T;
  try {
    body = JSON.parse(result.stdout) as T;
  } catch {
    assert.fail(`stdout is not one JSON document: ${JSON.stringify(result.stdout)}\nstderr: ${result.stderr}`);
  }
  return { body, stderr: result.stderr };
}

async function auditEntries(): Promise<AuditEntry[]> {
  return (await listAudit(bed.main, bed.keys, { limit: 500 })).entries;
}

async function until<T>(what: string, probe: () => Promise<T | undefined>, timeoutMs = 30_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (Date.now() > deadline) assert.fail(`${what}: not within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

interface JsonClaim {
  name: string;
  rebuild: string | null;
  token: string;
  fence: number | null;
  pttlMs: number;
  stale: boolean;
  holder: { workerId: string | null };
}

let slowJobId = "";
let slowClaim: JsonClaim;

test("status --json is the health report: both Redis servers answer, a worker runs; exit 0", async () => {
  const { body } = await cliJson<{ ok: boolean; workers: number; redis: { ok: boolean }; problems: string[] }>(
    ["status"],
    0,
  );
  assert.equal(body.ok, true);
  assert.equal(body.redis.ok, true);
  assert.equal(body.workers, 1);
  const human = await cli(["status"]);
  assert.equal(human.status, 0, human.stderr);
  assert.match(human.stdout, /^claimwatch is up: Redis from REDIS_URL$/m);
  assert.match(human.stdout, /^Workers: 1$/m);
  // What a crash of the claims Redis may lose, as the banner always says it (black-box helper-116).
  assert.match(human.stdout, /^Claims Redis durability: (durable|replicated|lossy|unknown): .+$/m);
});

test("trigger prints the preview, queues as the operator and is audited", async () => {
  const { body } = await cliJson<{
    preview: { outcome: string; version: string };
    queued: boolean;
    status: string;
    jobId: string;
  }>(["trigger", "slow", "--reason", "cli test"], 0);
  assert.equal(body.preview.outcome, "runs");
  assert.equal(body.queued, true);
  assert.equal(body.status, "queued");
  assert.match(body.jobId, /^run-/);
  slowJobId = body.jobId;
  const entry = (await auditEntries()).find((e) => e.action === "trigger" && e.detail.jobId === slowJobId);
  assert.ok(entry, "an audit entry for the trigger");
  assert.equal(entry.actor, ACTOR);
  assert.equal(entry.result, "done");
  assert.equal(entry.reason, "cli test");
  assert.equal(entry.detail.rebuild, "slow");

  const human = await cli(["trigger", "tenanted", "--tenant", "acme"]);
  assert.equal(human.status, 0, human.stderr);
  const [preview, queued] = human.stdout.trim().split("\n");
  assert.match(preview!, /^Preview: would build version \S+/);
  assert.match(
    queued!,
    new RegExp(`^(Queued job|Already waiting: job) run-\\S+ \\(${ACTOR.replace(/[()]/g, "\\$&")}; audited\\)\\.$`),
  );
});

test("an unknown rebuild lists the rebuilds; a tenant that is not the rebuild's lists its tenants; both exit 2, audited as refused", async () => {
  const unknown = await cliJson<{ error: { code: string; message: string } }>(["trigger", "nope"], 2);
  assert.equal(unknown.body.error.message, `no rebuild named 'nope'; rebuilds: ${REBUILDS}`);
  assert.ok(unknown.stderr.includes(`claimwatch: no rebuild named 'nope'; rebuilds: ${REBUILDS}\n`), unknown.stderr);

  const tenant = await cli(["trigger", "tenanted", "--tenant", "initech"]);
  assert.equal(tenant.status, 2);
  assert.equal(tenant.stdout, "");
  assert.match(tenant.stderr, /'initech' is not a tenant of rebuild 'tenanted'; its tenants: acme, globex/);
  assert.doesNotMatch(tenant.stderr, /needs a tenant/);

  const missing = await cli(["trigger", "tenanted"]);
  assert.equal(missing.status, 2);
  assert.match(missing.stderr, /rebuild 'tenanted' needs a tenant, one of: acme, globex/);

  const refusals = (await auditEntries()).filter((e) => e.action === "trigger" && e.result === "refused");
  assert.ok(refusals.some((e) => e.actor === ACTOR && /no rebuild named 'nope'/.test(e.reason)));
  assert.ok(refusals.some((e) => /'initech' is not a tenant/.test(e.reason)));

  const runs = await cli(["runs", "--rebuild", "tenanted", "--tenant", "initech"]);
  assert.equal(runs.status, 2);
  assert.match(runs.stderr, /'initech' is not a tenant of rebuild 'tenanted'; its tenants: acme, globex/);
  const queue = await cli(["queue", "--rebuild", "nope"]);
  assert.equal(queue.status, 2);
  assert.ok(queue.stderr.includes(`no rebuild named 'nope'; rebuilds: ${REBUILDS}\n`), queue.stderr);
  const verify = await cli(["verify", "nope"]);
  assert.equal(verify.status, 2);
  assert.ok(verify.stderr.includes(`no rebuild named 'nope'; rebuilds: ${REBUILDS}\n`), verify.stderr);
});

test("claims --json lists the running rebuild's claim with holder, fence, TTL left and stale", async () => {
  slowClaim = await until("the slow rebuild's claim", async () => {
    const { body } = await cliJson<{ claims: JsonClaim[]; serverTime: number }>(["claims"], 0);
    return body.claims.find((c) => c.rebuild === "slow");
  });
  assert.equal(typeof slowClaim.token, "string");
  assert.ok(typeof slowClaim.fence === "number" && slowClaim.fence >= 1);
  assert.ok(slowClaim.pttlMs > 0);
  assert.equal(slowClaim.stale, false);
  assert.ok(slowClaim.holder.workerId);

  const human = await cli(["claims"]);
  assert.equal(human.status, 0, human.stderr);
  const [header, ...rows] = human.stdout.trim().split("\n");
  assert.match(header!, /^CLAIM\s+REBUILD\s+HOLDER\s+FENCE\s+TTL LEFT\s+STATE\s+TOKEN$/);
  const row = rows.find((r) => r.startsWith(slowClaim.name));
  assert.ok(row, human.stdout);
  assert.ok(row.includes(slowClaim.token) && /\slive\s/.test(row), row);
});

test("a trigger the preview says would be skipped queues nothing and exits 1", async () => {
  const { body, stderr } = await cliJson<{ preview: { outcome: string; reason: string }; queued: boolean }>(
    ["trigger", "slow"],
    1,
  );
  assert.equal(body.queued, false);
  assert.equal(body.preview.outcome, "skip");
  assert.equal(body.preview.reason, "claim-held");
  assert.match(stderr, /not queued: would be skipped: held by .*--queue-anyway/);
  // For a person too, the preview comes first (stdout), the refusal after it (stderr).
  const human = await cli(["trigger", "slow"]);
  assert.equal(human.status, 1, human.stderr);
  assert.match(human.stdout, /^Preview: would be skipped: held by .+ \(version .+\)\n$/);
  assert.match(human.stderr, /^claimwatch: not queued: would be skipped/);
  // Asked for and not done: audited as refused, once per command.
  const refusals = (await auditEntries()).filter(
    (e) => e.action === "trigger" && e.result === "refused" && e.detail.rebuild === "slow",
  );
  assert.equal(refusals.length, 2, JSON.stringify(refusals));
  assert.ok(refusals.every((e) => e.actor === ACTOR && /^not queued: would be skipped/.test(e.reason)));
});

test("a trigger the preview says would fail (its output is another claim's directory) queues nothing and exits 1", async () => {
  const output = path.join(bed.dir, "out", "tenanted", "acme");
  const file = path.join(output, ".claimwatch-claim");
  fs.mkdirSync(output, { recursive: true });
  const original = fs.existsSync(file) ? fs.readFileSync(file) : null;
  fs.writeFileSync(file, "/mnt/elsewhere/tenanted:acme\n");
  try {
    const { body, stderr } = await cliJson<{ preview: { outcome: string }; queued: boolean }>(
      ["trigger", "tenanted", "--tenant", "acme", "--version", "v-fails"],
      1,
    );
    assert.equal(body.queued, false);
    assert.equal(body.preview.outcome, "fails");
    assert.match(
      stderr,
      /not queued: would fail: output .* is the directory of claim '\/mnt\/elsewhere\/tenanted:acme'.*--queue-anyway/,
    );
    const refusals = (await auditEntries()).filter(
      (e) => e.action === "trigger" && e.result === "refused" && e.detail.rebuild === "tenanted",
    );
    assert.ok(
      refusals.some((e) => /^not queued: would fail: /.test(e.reason)),
      JSON.stringify(refusals),
    );
    assert.equal(
      (await bed.queue.getJobs(["waiting", "active", "delayed", "prioritized"])).filter(
        (job) => job.data.rebuild === "tenanted" && job.data.version === "v-fails",
      ).length,
      0,
    );
  } finally {
    if (original) fs.writeFileSync(file, original);
    else fs.rmSync(file);
  }
});

test("queue --json is the queue view: the active job, a delayed one and the schedule's tick with next attempt and why; filters by rebuild and tenant", async () => {
  const delayedId = "cli-test-delayed";
  await bed.queue.add(
    "tenanted",
    { rebuild: "tenanted", tenant: "globex", force: false, trigger: "api" },
    { jobId: delayedId, delay: 3_600_000 },
  );
  const { body } = await cliJson<QueueView>(["queue"], 0);
  assert.equal(typeof body.serverTime, "number");
  const active = body.jobs.find((j) => j.jobId === slowJobId);
  assert.equal(active?.state, "active", JSON.stringify(body.jobs));
  assert.equal(active.rebuild, "slow");
  assert.equal(active.lastRun?.id, `${slowJobId}-a1`);
  assert.equal(active.lastRun.status, "running");
  const delayed = body.jobs.find((j) => j.jobId === delayedId);
  assert.equal(delayed?.state, "delayed");
  assert.deepEqual(delayed.waitReason, { kind: "queued", detail: "delayed when queued" });
  assert.ok(delayed.nextAttemptAt !== null && delayed.nextAttemptAt >= delayed.createdAt + 3_600_000 - 1);
  const tick = body.jobs.find((j) => j.rebuild === "nightly");
  assert.equal(tick?.state, "delayed", JSON.stringify(body.jobs));
  assert.equal(tick.waitReason?.kind, "scheduled-tick");
  assert.equal(tick.trigger, "schedule");
  assert.ok(body.counts.delayed >= 2 && body.counts.active >= 1, JSON.stringify(body.counts));

  const filtered = await cliJson<QueueView>(["queue", "--rebuild", "tenanted", "--tenant", "globex"], 0);
  assert.deepEqual(
    filtered.body.jobs.map((j) => j.jobId),
    [delayedId],
  );
  const limited = await cliJson<QueueView>(["queue", "--limit", "1"], 0);
  assert.equal(limited.body.jobs.filter((j) => j.state === "delayed").length, 1);
  assert.equal(limited.body.counts.delayed, body.counts.delayed, "counts are the whole queue's");

  const human = await cli(["queue"]);
  assert.equal(human.status, 0, human.stderr);
  assert.match(
    human.stdout,
    /^Queue \(all rebuilds\): \d+ active, \d+ waiting, \d+ prioritized, \d+ delayed, \d+ failed or cancelled \(kept\)$/m,
  );
  assert.match(human.stdout, /^STATE\s+JOB\s+REBUILD\s+FAILED\s+QUEUED\s+NEXT ATTEMPT\s+WHY$/m);
  assert.match(
    human.stdout,
    new RegExp(
      `^delayed\\s+${delayedId}\\s+tenanted/globex\\s.*\\(in [^)]*min[^)]*\\)\\s+queued: delayed when queued$`,
      "m",
    ),
  );
  assert.match(human.stdout, /^delayed\s+\S+\s+nightly\s.*\s+scheduled: the schedule's next tick$/m);
  assert.match(human.stdout, new RegExp(`^active\\s+${slowJobId}\\s+slow\\s.*running as ${slowJobId}-a1$`, "m"));
  // Filtered, the header says the counts are the whole queue's and whose rows follow.
  const humanFiltered = await cli(["queue", "--rebuild", "tenanted", "--tenant", "globex"]);
  assert.equal(humanFiltered.status, 0, humanFiltered.stderr);
  assert.match(
    humanFiltered.stdout,
    /^Whole queue: \d+ active, .*\d+ failed or cancelled \(kept\); below, tenanted\/globex's jobs$/m,
  );
  await bed.queue.remove(delayedId);
});

test("runs --json lists run records with filters; a bad status is refused naming the choices", async () => {
  const { body } = await cliJson<{ runs: { id: string; jobId: string; rebuild: string; status: string }[] }>(
    ["runs", "--rebuild", "slow", "--limit", "5"],
    0,
  );
  assert.ok(body.runs.length >= 1);
  assert.ok(body.runs.every((r) => r.rebuild === "slow"));
  assert.ok(
    body.runs.some((r) => r.jobId === slowJobId && r.status === "running"),
    JSON.stringify(body.runs),
  );
  // `--json` before the command is the same request.
  const first = await cli(["--json", "runs", "--rebuild", "slow", "--limit", "5"]);
  assert.equal(first.status, 0, first.stderr);
  const firstBody = JSON.parse(first.stdout) as typeof body;
  assert.ok(firstBody.runs.length >= 1 && firstBody.runs.every((r) => r.rebuild === "slow"), first.stdout);
  const bad = await cli(["runs", "--status", "bogus"]);
  assert.equal(bad.status, 2);
  assert.match(bad.stderr, /status: must be one of queued, running/);
  const human = await cli(["runs", "--rebuild", "slow"]);
  assert.equal(human.status, 0, human.stderr);
  assert.match(human.stdout, /^RUN\s+REBUILD\s+STATUS\s+TRIGGER\s+STARTED\s+DURATION\s+REASON$/m);
  assert.match(human.stdout, new RegExp(`^${slowJobId}-a1\\s+slow\\s+running\\s+manual\\s`, "m"));
});

test("mutations need an operator identity: none, an unknown token or a viewer's is exit 2 and changes nothing", async () => {
  const noToken = { ...operatorEnv };
  delete noToken.CLAIMWATCH_TOKEN;
  const args = ["release", slowClaim.name, "--token", slowClaim.token, "--reason", "no identity"];
  const none = await cli(args, noToken);
  assert.equal(none.status, 2);
  assert.match(none.stderr, /needs an operator identity: .*set CLAIMWATCH_TOKEN/);
  const wrong = await cli(args, { ...operatorEnv, CLAIMWATCH_TOKEN: "not-a-token-of-this-claimwatch" });
  assert.equal(wrong.status, 2);
  assert.match(wrong.stderr, /is not one this claimwatch accepts/);
  const viewer = await cli(args, { ...operatorEnv, CLAIMWATCH_TOKEN: VIEWER_TOKEN });
  assert.equal(viewer.status, 2);
  assert.match(viewer.stderr, /needs the operator role/);
  const refused = (await auditEntries()).filter((e) => e.action === "force-release" && e.result === "refused");
  assert.ok(refused.some((e) => e.actor === "watcher (viewer) via cli"));
  const { body } = await cliJson<{ claims: JsonClaim[] }>(["claims"], 0);
  assert.ok(
    body.claims.some((c) => c.token === slowClaim.token),
    "the claim is still held",
  );
});

test("release with a stale token is refused (exit 1); with the shown token it releases (exit 0); both audited", async () => {
  const stale = await cliJson<{ status: string; auditId: string }>(
    ["release", slowClaim.name, "--token", `${slowClaim.token}x`, "--reason", "wrong token"],
    1,
  );
  assert.equal(stale.body.status, "not-owner");
  assert.match(stale.stderr, /not released: .* is held with another token now/);

  const short = await cli(["release", slowClaim.name, "--token", slowClaim.token, "--reason", "x"]);
  assert.equal(short.status, 2);
  assert.match(short.stderr, /reason: must say why/);

  const released = await cliJson<{ status: string; auditId: string }>(
    ["release", slowClaim.name, "--token", slowClaim.token, "--reason", "stuck at 02:00"],
    0,
  );
  assert.equal(released.body.status, "released");
  const entries = await auditEntries();
  const done = entries.find((e) => e.id === released.body.auditId);
  assert.equal(done?.action, "force-release");
  assert.equal(done.actor, ACTOR);
  assert.equal(done.result, "done");
  assert.equal(done.reason, "stuck at 02:00");
  assert.equal(done.detail.name, slowClaim.name);
  const refusedEntry = entries.find((e) => e.id === stale.body.auditId);
  assert.equal(refusedEntry?.result, "refused");
  assert.equal(refusedEntry.actor, ACTOR);

  const again = await cliJson<{ status: string }>(
    ["release", slowClaim.name, "--token", slowClaim.token, "--reason", "once more"],
    1,
  );
  // The worker acknowledges (its step stopped) within moments: then nobody holds it, or the
  // deferred job's next attempt holds it with a new token (a force release never costs the
  // request). Until then it is still being released. Either way the old token frees nothing.
  assert.match(
    again.body.status,
    /^(missing|releasing|not-owner)$/,
    `${JSON.stringify(again.body)}; slow runs: ${JSON.stringify((await bed.allRuns()).filter((r) => r.rebuild === "slow").map((r) => [r.id, r.status, r.reason]))}`,
  );
});

interface JsonCancel {
  status: string;
  jobId: string;
  runId: string | null;
  auditId: string;
}

let cancelledRunId = "";

test("cancel <run> stops a running job: the run ends cancelled, the job is not retried, the cancel is audited", async () => {
  const jobId = await bed.trigger("cancellable", { trigger: "manual" });
  const running = await bed.waitForRun((r) => r.jobId === jobId && r.status === "running", 30_000, "the run");
  // A run id means its job.
  const { body } = await cliJson<JsonCancel>(["cancel", running.id, "--reason", "wrong input at 02:00"], 0);
  assert.equal(body.status, "cancelling");
  assert.equal(body.jobId, jobId);
  assert.equal(body.runId, running.id);

  const ended = await bed.waitForRun((r) => r.id === running.id && r.status !== "running", 30_000, "the run's end");
  assert.equal(ended.status, "cancelled", JSON.stringify(ended));
  assert.match(ended.reason ?? "", /wrong input at 02:00/);
  // Not retried: the job failed for good (attempts: 3 would have brought it back to delayed).
  const state = await until("the job's end", async () => {
    const s = await bed.queue.getJobState(jobId);
    return s === "active" ? undefined : s;
  });
  assert.equal(state, "failed");
  assert.deepEqual(
    (await bed.runsOfJob(jobId)).map((r) => [r.attempt, r.status]),
    [[1, "cancelled"]],
  );

  const entry = (await auditEntries()).find((e) => e.id === body.auditId);
  assert.equal(entry?.action, "cancel");
  assert.equal(entry.actor, ACTOR);
  assert.equal(entry.result, "done");
  assert.equal(entry.reason, "wrong input at 02:00");
  assert.equal(entry.detail.jobId, jobId);
  assert.equal(entry.detail.outcome, "cancelling");
  // Audited once, by cancelJob.
  assert.equal((await auditEntries()).filter((e) => e.action === "cancel" && e.detail.jobId === jobId).length, 1);
  cancelledRunId = running.id;

  const again = await cliJson<JsonCancel & { state: string; lastRun?: unknown }>(
    ["cancel", jobId, "--reason", "once more"],
    1,
  );
  assert.equal(again.body.status, "finished");
  // How its run ended (cancelled), not BullMQ's word for the job (failed).
  assert.match(
    again.stderr,
    new RegExp(`nothing to cancel: job ${jobId} has ended already \\(its last run ${running.id} is cancelled\\)`),
  );
  assert.deepEqual(again.body.lastRun, { id: running.id, status: "cancelled" });
});

test("cancel of an unknown job or run is exit 2 naming where to look, audited as refused once", async () => {
  const { body, stderr } = await cliJson<{ error: { code: string; message: string }; auditId: string }>(
    ["cancel", "run-00000000-0000-0000-0000-000000000000-a1", "--reason", "typo check"],
    2,
  );
  assert.equal(body.error.code, "not-found");
  assert.match(
    stderr,
    /^claimwatch: no job or run 'run-00000000-0000-0000-0000-000000000000-a1' \(unknown, or finished and removed from the queue\); the cancel request is kept: a worker still running it \(a job its Redis lost\) stops it; `claimwatch queue` lists the jobs/m,
  );
  const refusals = (await auditEntries()).filter(
    (e) => e.action === "cancel" && e.detail.jobId === "run-00000000-0000-0000-0000-000000000000",
  );
  assert.equal(refusals.length, 1, JSON.stringify(refusals));
  assert.equal(refusals[0]!.id, body.auditId);
  assert.equal(refusals[0]!.result, "refused");
  assert.equal(refusals[0]!.actor, ACTOR);

  const human = await cli(["cancel", "no-such-job", "--reason", "typo check"]);
  assert.equal(human.status, 2);
  assert.equal(human.stdout, "");
  assert.match(human.stderr, /no job or run 'no-such-job'/);
  const short = await cli(["cancel", "no-such-job", "--reason", "x"]);
  assert.equal(short.status, 2);
  assert.match(short.stderr, /reason: must say why/);
});

test("cancel of a waiting job removes it; cancelling it again is exit 1 saying how it ended, not an unknown job", async () => {
  const jobId = "cli-test-waiting";
  await bed.queue.add(
    "tenanted",
    { rebuild: "tenanted", tenant: "acme", force: false, trigger: "api" },
    { jobId, delay: 3_600_000 },
  );
  const { body } = await cliJson<JsonCancel>(["cancel", jobId, "--reason", "not tonight"], 0);
  assert.equal(body.status, "removed");
  assert.equal(await bed.queue.getJob(jobId), undefined);
  assert.deepEqual(
    (await bed.runsOfJob(jobId)).map((r) => r.status),
    ["cancelled"],
  );

  const again = await cliJson<JsonCancel & { state: string; lastRun: { id: string; status: string } }>(
    ["cancel", jobId, "--reason", "once more"],
    1,
  );
  assert.equal(again.body.status, "finished");
  assert.deepEqual(again.body.lastRun, { id: `${jobId}-a1`, status: "cancelled" });
  assert.match(
    again.stderr,
    new RegExp(`nothing to cancel: job ${jobId} has ended already \\(its last run ${jobId}-a1 is cancelled\\)`),
  );
  const refused = (await auditEntries()).find((e) => e.id === again.body.auditId);
  assert.equal(refused?.result, "refused");
});

test("retry <run> of a cancelled run queues a new forced job of the same rebuild that links back; audited; an unknown run is exit 2", async () => {
  assert.ok(cancelledRunId, "the cancel test ran");
  const { body } = await cliJson<{ status: string; runId: string; jobId: string; auditId: string }>(
    ["retry", cancelledRunId, "--reason", "inputs fixed"],
    0,
  );
  assert.equal(body.status, "queued");
  assert.equal(body.runId, cancelledRunId);
  assert.match(body.jobId, /^run-/);
  assert.notEqual(body.jobId, cancelledRunId.replace(/-a\d+$/, ""));
  const job = await bed.queue.getJob(body.jobId);
  assert.ok(job, "the new job is in the queue");
  assert.equal(job.data.rebuild, "cancellable");
  assert.equal(job.data.retryOf, cancelledRunId);
  assert.equal(job.data.force, true);
  const entry = (await auditEntries()).find((e) => e.id === body.auditId);
  assert.equal(entry?.action, "retry");
  assert.equal(entry.actor, ACTOR);
  assert.equal(entry.result, "done");
  assert.equal(entry.detail.jobId, body.jobId);

  // Cancelled by its job id: removed if still waiting, else stopped by its worker.
  const cancelled = await cliJson<JsonCancel>(["cancel", body.jobId, "--reason", "not now"], 0);
  assert.match(cancelled.body.status, /^(removed|cancelling)$/);
  await bed.waitForRun((r) => r.jobId === body.jobId && r.status === "cancelled", 30_000, "the retry's cancel");

  const unknown = await cliJson<{ error: { code: string; message: string } }>(
    ["retry", "run-nope-a1", "--reason", "typo check"],
    2,
  );
  assert.equal(unknown.body.error.code, "not-found");
  assert.match(unknown.stderr, /no run 'run-nope-a1'; a run id looks like run-<uuid>-a1/);
  const refusals = (await auditEntries()).filter((e) => e.action === "retry" && e.detail.runId === "run-nope-a1");
  assert.equal(refusals.length, 1, JSON.stringify(refusals));
  assert.equal(refusals[0]!.result, "refused");
});

test("pause then resume a schedule: paused in Redis with who and why, its tick gone from the queue, then back; both audited", async () => {
  const schedulerId = schedulerIdOf("nightly", undefined);
  const paused = await cliJson<{
    status: string;
    action: string;
    schedules: { schedulerId: string; tenant: string | null; outcome: string }[];
    auditId: string;
  }>(["pause", "nightly", "--reason", "upstream is down"], 0);
  assert.equal(paused.body.status, "done");
  assert.deepEqual(paused.body.schedules, [{ schedulerId, tenant: null, outcome: "paused" }]);
  const pause = await readSchedulePause(bed.main, bed.keys, "nightly", undefined);
  assert.equal(pause?.actor, ACTOR);
  assert.equal(pause.reason, "upstream is down");
  const whilePaused = await cliJson<QueueView>(["queue", "--rebuild", "nightly"], 0);
  assert.deepEqual(whilePaused.body.jobs, [], "the paused schedule's tick is removed");
  // `status` shows it too, for the operator wondering why nothing ran.
  const status = await cliJson<{ pausedSchedules: { rebuild: string; tenant: string | null; actor: string }[] }>(
    ["status"],
    0,
  );
  assert.deepEqual(
    status.body.pausedSchedules.map((p) => [p.rebuild, p.tenant, p.actor]),
    [["nightly", null, ACTOR]],
  );
  const humanStatus = await cli(["status"]);
  assert.match(
    humanStatus.stdout,
    /^Paused schedules \(nothing enqueued until resumed\):\n {2}- nightly: by tester \(operator\) via cli at .+: upstream is down$/m,
  );
  const pauseEntry = (await auditEntries()).find((e) => e.id === paused.body.auditId);
  assert.equal(pauseEntry?.action, "pause-schedule");
  assert.equal(pauseEntry.actor, ACTOR);
  assert.equal(pauseEntry.result, "done");
  assert.equal(pauseEntry.detail.rebuild, "nightly");

  const twice = await cli(["pause", "nightly", "--reason", "upstream is down"]);
  assert.equal(twice.status, 0, twice.stderr);
  assert.match(twice.stdout, /^Nothing changed: the schedule of nightly was paused already/m);

  const resumed = await cliJson<{ status: string; schedules: { outcome: string }[]; auditId: string }>(
    ["resume", "nightly", "--reason", "upstream is back"],
    0,
  );
  assert.deepEqual(
    resumed.body.schedules.map((s) => s.outcome),
    ["resumed"],
  );
  assert.equal(await readSchedulePause(bed.main, bed.keys, "nightly", undefined), null);
  const afterResume = await cliJson<{ pausedSchedules: unknown[] }>(["status"], 0);
  assert.deepEqual(afterResume.body.pausedSchedules, []);
  const resumeEntry = (await auditEntries()).find((e) => e.id === resumed.body.auditId);
  assert.equal(resumeEntry?.action, "resume-schedule");
  assert.equal(resumeEntry.actor, ACTOR);
  assert.equal(resumeEntry.reason, "upstream is back");
  const tick = await until("the resumed schedule's tick", async () => {
    const { body } = await cliJson<QueueView>(["queue", "--rebuild", "nightly"], 0);
    return body.jobs.find((j) => j.waitReason?.kind === "scheduled-tick");
  });
  assert.equal(tick.state, "delayed");
});

test("pause of an unknown rebuild lists the rebuilds; of one without a schedule lists the scheduled ones; bad tenant lists tenants; exit 2, audited", async () => {
  const unknown = await cliJson<{ error: { code: string; message: string } }>(
    ["pause", "nope", "--reason", "typo check"],
    2,
  );
  assert.equal(unknown.body.error.message, `no rebuild named 'nope'; rebuilds: ${REBUILDS}`);
  const unscheduled = await cli(["resume", "slow", "--reason", "typo check"]);
  assert.equal(unscheduled.status, 2);
  assert.match(
    unscheduled.stderr,
    /rebuild 'slow' has no schedule \(it runs on demand only\); scheduled rebuilds: nightly/,
  );
  const tenant = await cli(["pause", "nightly", "--tenant", "acme", "--reason", "typo check"]);
  assert.equal(tenant.status, 2);
  assert.match(tenant.stderr, /rebuild 'nightly' has no tenants/);
  const entries = await auditEntries();
  assert.ok(
    entries.some(
      (e) => e.action === "pause-schedule" && e.result === "refused" && /no rebuild named 'nope'/.test(e.reason),
    ),
  );
  assert.ok(
    entries.some((e) => e.action === "resume-schedule" && e.result === "refused" && /no schedule/.test(e.reason)),
  );
  assert.equal(await readSchedulePause(bed.main, bed.keys, "nightly", undefined), null, "nothing paused");
});

test("verify --json re-hashes the published builds; npm run trigger is the CLI's trigger", async () => {
  const { body } = await cliJson<{ rebuild: string; tenant: string | null; checked: number; changed: unknown[] }>(
    ["verify", "tenanted", "acme"],
    0,
  );
  assert.deepEqual([body.rebuild, body.tenant, body.changed], ["tenanted", "acme", []]);
  assert.equal(typeof body.checked, "number");

  const alias = await run("npm", ["run", "-s", "trigger", "--", "nope"], operatorEnv);
  assert.equal(alias.status, 2, alias.stderr);
  assert.ok(alias.stderr.includes(`no rebuild named 'nope'; rebuilds: ${REBUILDS}\n`), alias.stderr);
});

test("without REDIS_URL the embedded Redis is found through CLAIMWATCH_DATA_DIR; when none runs, the message says where it looked", async () => {
  const embeddedEnv = (dataDir: string) => {
    const env: NodeJS.ProcessEnv = { ...operatorEnv, CLAIMWATCH_DATA_DIR: dataDir };
    delete env.REDIS_URL;
    delete env.CLAIMS_REDIS_URL;
    return env;
  };
  // What a running `npm start` records in its data dir: the embedded Redis's pid and URL.
  const running = path.join(scratch, "running");
  fs.mkdirSync(running);
  fs.writeFileSync(
    path.join(running, "embedded-redis.json"),
    JSON.stringify({ pid: bed.redis.pid, url: bed.redis.url }),
  );
  const found = await cli(["status"], embeddedEnv(running));
  assert.equal(found.status, 0, found.stderr);
  assert.ok(
    found.stdout.includes(
      `the embedded Redis (pid ${bed.redis.pid}) recorded in ${path.join(running, "embedded-redis.json")}`,
    ),
    found.stdout,
  );
  const listed = await cliJson<{ runs: { jobId: string }[] }>(["runs", "--rebuild", "slow"], 0, embeddedEnv(running));
  assert.ok(listed.body.runs.some((r) => r.jobId === slowJobId));

  const empty = path.join(scratch, "empty");
  fs.mkdirSync(empty);
  const none = await cliJson<{ error: { code: string; message: string } }>(["claims"], 3, embeddedEnv(empty));
  assert.equal(none.body.error.code, "redis-not-found");
  assert.ok(
    none.body.error.message.includes(
      `no embedded Redis is running in the data dir ${empty}: ${path.join(empty, "embedded-redis.json")} does not exist`,
    ),
    none.body.error.message,
  );
  assert.match(none.stderr, /set CLAIMWATCH_DATA_DIR to the data dir of the claimwatch that runs, or set REDIS_URL/);

  // A record left by a claimwatch that stopped: its pid is gone.
  const stale = path.join(scratch, "stale");
  fs.mkdirSync(stale);
  const gone = 2 ** 22 + 1; // above the largest pid_max Linux allows: never a running process
  fs.writeFileSync(path.join(stale, "embedded-redis.json"), JSON.stringify({ pid: gone, url: bed.redis.url }));
  const staleResult = await cli(["claims"], embeddedEnv(stale));
  assert.equal(staleResult.status, 3);
  assert.match(staleResult.stderr, new RegExp(`names pid ${gone}, which is not running`));
});

test("a Redis that does not answer is exit 3, for status (with the report) and for the other commands", async () => {
  const port = await freePort();
  const env = { ...operatorEnv, REDIS_URL: `redis://127.0.0.1:${port}` };
  const status = await cliJson<{ ok: boolean; redis: { ok: boolean; error: string } }>(["status"], 3, env);
  assert.equal(status.body.ok, false);
  assert.equal(status.body.redis.ok, false);
  // The connection's own error (address and cause), not ioredis' "max retries per request".
  assert.equal(status.body.redis.error, `no connection: connect ECONNREFUSED 127.0.0.1:${port}`);
  const claims = await cli(["claims"], env);
  assert.equal(claims.status, 3);
  assert.match(
    claims.stderr,
    new RegExp(
      `Redis at redis://127\\.0\\.0\\.1:${port} \\(from REDIS_URL\\) does not answer: no connection: connect ECONNREFUSED 127\\.0\\.0\\.1:${port}`,
    ),
  );
  // Only a separate claims Redis away: named with where its URL came from (helper-151).
  const away = await cli(["claims"], { ...operatorEnv, CLAIMS_REDIS_URL: `redis://127.0.0.1:${port}` });
  assert.equal(away.status, 3);
  assert.match(
    away.stderr,
    new RegExp(`Claims Redis at redis://127\\.0\\.0\\.1:${port} \\(from CLAIMS_REDIS_URL\\) does not answer`),
  );
});

test("bad usage is exit 2 with the usage on stderr, and one JSON document on stdout with --json", async () => {
  const missing = await cliJson<{ error: { code: string; message: string } }>(["release", "x"], 2);
  assert.equal(missing.body.error.code, "bad-usage");
  assert.match(missing.stderr, /required option '--token <token>' not specified/);
  const unknown = await cli(["frobnicate"]);
  assert.equal(unknown.status, 2);
  assert.match(unknown.stderr, /unknown command 'frobnicate'/);
  const help = await cli(["--help"]);
  assert.equal(help.status, 0);
  assert.match(help.stdout, /Exit codes:\n {2}0 {2}done/);
});
