/**
 * `claimwatch trigger` when an input read hangs in the kernel (a FIFO nobody writes to): the
 * preview gives up after its 3 s as the dashboard's does, the job is queued (the worker reads the
 * inputs), and the CLI exits with its own code. The read ran in a child process that the CLI
 * SIGKILLs: read in the CLI's own process it could not exit but by SIGKILL (exit 137).
 * Real processes (bin/claimwatch.mjs) on a real Redis; no worker runs, so the job stays queued.
 */
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { after, before, test } from "node:test";
import { createTestBed, type TestBed } from "../support/stack";

const OPERATOR_TOKEN = "cli-hung-operator-token-0123456789";
let bed: TestBed;
let fifo: string;

before(async () => {
  bed = await createTestBed({
    hung: { output: "out/hung", inputs: ["in/pipe"], steps: [{ name: "s", run: ["true"] }] },
  });
  fifo = path.join(bed.dir, "in", "pipe");
  fs.mkdirSync(path.dirname(fifo), { recursive: true });
  assert.equal(spawnSync("mkfifo", [fifo]).status, 0, "mkfifo");
});
after(async () => {
  await bed?.close();
});

/** Live processes whose command line names `needle`. */
function processesNaming(needle: string): number[] {
  const found: number[] = [];
  for (const entry of fs.readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const status = fs.readFileSync(`/proc/${entry}/stat`, "utf8");
      if (/\) Z /.test(status)) continue; // a zombie holds nothing
      if (fs.readFileSync(`/proc/${entry}/cmdline`, "utf8").includes(needle)) found.push(Number(entry));
    } catch {
      // gone
    }
  }
  return found;
}

test("trigger with an input stuck in the kernel: the preview cannot tell, the job is queued, exit 0 (not killed)", async () => {
  const env = { ...bed.env, CLAIMWATCH_OPERATOR_TOKEN: `tester:${OPERATOR_TOKEN}`, CLAIMWATCH_TOKEN: OPERATOR_TOKEN };
  const result = await new Promise<{
    status: number | null;
    signal: NodeJS.Signals | null;
    stdout: string;
    stderr: string;
  }>((resolve, reject) => {
    const child = spawn(process.execPath, ["bin/claimwatch.mjs", "trigger", "hung", "--reason", "test", "--json"], {
      env,
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
    const timer = setTimeout(() => child.kill("SIGKILL"), 90_000); // a hang fails, not waits
    child.once("error", reject);
    child.once("close", (status, signal) => {
      clearTimeout(timer);
      resolve({ status, signal, stdout, stderr });
    });
  });
  assert.equal(result.signal, null, `ended by ${result.signal}; stderr: ${result.stderr}`);
  assert.equal(result.status, 0, `exit ${result.status}\nstdout: ${result.stdout}\nstderr: ${result.stderr}`);
  const body = JSON.parse(result.stdout) as { preview: { error?: string }; queued: boolean; jobId: string };
  assert.match(body.preview.error ?? "", /inputs were not read within 3 s here; give a version/);
  assert.equal(body.queued, true);
  assert.ok(await bed.queue.getJob(body.jobId), "the job waits in the queue");
  assert.deepEqual(processesNaming(fifo), [], "the child that read the FIFO is gone");
});
