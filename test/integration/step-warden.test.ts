/**
 * The step warden, the worker's dead-man switch (lib/rebuilds/steps/warden.ts): a worker that
 * stops running for longer than its job lock — event loop blocked, or SIGSTOPped alone — has
 * its jobs handed to other attempts, so its steps are SIGKILLed while it is still stuck, and the
 * step then reports why. A worker that keeps running keeps its steps. Real processes: a stand-in
 * worker (test/support/step-host.ts) and, at the end, real workers on a real Redis, where the
 * same job's next attempt takes the claim over at once and must never write beside the old step.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import { killMarkedProcesses, newMarker, pidsWithMarker } from "../support/markers";
import { waitForLine } from "../support/processes";
import { createTestBed, type TestBed } from "../support/stack";

// Each stand-in worker's directory (it may be SIGKILLed, and then cannot remove its own).
const hostDirs: string[] = [];
after(() => {
  killMarkedProcesses();
  for (const dir of hostDirs) fs.rmSync(dir, { recursive: true, force: true });
});

/** A TERM-deaf step with a TERM-deaf background child and a setsid daemon. */
const STUBBORN = "(trap '' TERM; sleep 600) & setsid sleep 600 & trap '' TERM; while :; do sleep 0.2; done";

/**
 * tsx's esbuild service, which the host (run with `--import tsx`) starts when its code is not in
 * tsx's cache — on a fresh clone, or after an edit. It carries the host's environment, marker
 * included, and sleeps on while the host is blocked: the host's helper, not the step's. (It made
 * the first case below fail on clean-clone CI runs; `TSX_DISABLE_CACHE=1` reproduces it.)
 */
function isEsbuildService(pid: number): boolean {
  try {
    return /\/esbuild$/.test(fs.readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0")[0]!);
  } catch {
    return false;
  }
}

/** The cgroup v2 directory this test process is in, or null (no cgroup v2 mounted). */
function ownCgroupDir(): string | null {
  const line = fs
    .readFileSync("/proc/self/cgroup", "utf8")
    .split("\n")
    .find((l) => l.startsWith("0::"));
  const mount = fs
    .readFileSync("/proc/self/mounts", "utf8")
    .split("\n")
    .map((l) => l.split(" "))
    .find((fields) => fields[2] === "cgroup2")?.[1];
  return line && mount ? path.join(mount, line.slice(3)) : null;
}

/** Cgroups made for hosts of their own (`ownCgroup`), removed at the end (their children first). */
const hostCgroups: string[] = [];
after(() => {
  for (const dir of hostCgroups.reverse()) {
    const children = fs.existsSync(dir) ? fs.readdirSync(dir, { recursive: true, withFileTypes: true }) : [];
    const dirs = children
      .filter((e) => e.isDirectory())
      .map((e) => path.join(e.parentPath, e.name))
      .sort((a, b) => b.length - a.length);
    for (const sub of [...dirs, dir]) {
      try {
        fs.writeFileSync(path.join(sub, "cgroup.kill"), "1");
      } catch {
        // gone, or no cgroup.kill
      }
    }
    for (const sub of [...dirs, dir]) {
      for (let i = 0; i < 50; i++) {
        try {
          fs.rmdirSync(sub);
          break;
        } catch {
          Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 20);
        }
      }
    }
  }
});

/**
 * A stand-in worker running `script` as its step. `ownCgroup`: in a cgroup of its own, so that
 * no other worker starting meanwhile (the suite runs files side by side) sweeps its steps up as
 * a dead worker's leftovers — what the test must see done by the dead worker's own keeper (review
 * helper-140: the test passed without the keeper that way).
 */
function hostIn(script: string, env: Record<string, string>, options: { ownCgroup?: boolean } = {}) {
  const marker = newMarker();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "cw-step-host-"));
  hostDirs.push(dir);
  const argv = [process.execPath, "--import", "tsx", "test/support/step-host.ts", script, "30000"];
  let own: string | null = null;
  if (options.ownCgroup) {
    const parent = ownCgroupDir();
    if (parent) {
      own = path.join(parent, `cw-step-host-${process.pid}-${hostCgroups.length}`);
      fs.mkdirSync(own);
      hostCgroups.push(own);
    }
  }
  const [program, ...args] = own ? ["/bin/sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', own, ...argv] : argv;
  const child = spawn(program!, args, {
    env: { ...process.env, ...env, [marker.name]: marker.value, STEP_HOST_DIR: dir },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let output = "";
  child.stdout!.on("data", (chunk: Buffer) => (output += chunk.toString()));
  /** The step's processes: everything with the marker but the host itself and its esbuild. */
  const stepPids = () => pidsWithMarker(marker).filter((pid) => pid !== child.pid && !isEsbuildService(pid));
  return { child, stepPids, output: () => output };
}

/** Each process as `pid (state, cgroup) command`, for a failure message. */
function describePids(pids: number[]): string {
  const read = (file: string) => {
    try {
      return fs.readFileSync(file, "utf8");
    } catch {
      return "?";
    }
  };
  return pids
    .map((pid) => {
      const state = /\) (\S)/.exec(read(`/proc/${pid}/stat`))?.[1] ?? "?";
      const cgroup = read(`/proc/${pid}/cgroup`).trim().split("\n").pop();
      return `${pid} (${state}, ${cgroup}) ${read(`/proc/${pid}/cmdline`).replace(/\0/g, " ").trim()}`;
    })
    .join("; ");
}

async function until(check: () => boolean, timeoutMs: number, what: string): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (!check()) {
    if (performance.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

function isWarden(pid: number): boolean {
  try {
    return fs.readFileSync(`/proc/${pid}/cmdline`, "utf8").includes("warden-main.mjs");
  } catch {
    return false;
  }
}

/** The pid of the step warden of the stand-in worker `host` (its child running warden-main.mjs), other than `not`. */
async function wardenOf(host: number, not?: number): Promise<number> {
  let found: number | undefined;
  await until(
    () => {
      let children: number[];
      try {
        children = fs
          .readFileSync(`/proc/${host}/task/${host}/children`, "utf8")
          .trim()
          .split(/\s+/)
          .filter(Boolean)
          .map(Number);
      } catch {
        return false;
      }
      found = children.find((pid) => pid !== not && isWarden(pid));
      return found !== undefined;
    },
    20_000,
    "the step warden",
  );
  return found!;
}

for (const mode of ["cgroup", "pid-namespace"] as const)
  describe(`a stand-in worker and its warden (${mode})`, () => {
    const host = (script: string, env: Record<string, string>, options: { ownCgroup?: boolean } = {}) =>
      hostIn(script, { ...env, CLAIMWATCH_STEP_CONTAINMENT: mode }, options);
    test("its event loop blocked past the limit: the step and all it started die while it is still blocked; the step says why", async () => {
      const h = host(STUBBORN, {
        STEP_HOST_SILENCE_MS: "1000",
        // Long enough that the check below can see the step gone while it lasts, on a loaded
        // machine (the suite runs two files at a time).
        STEP_HOST_BLOCK_MS: "20000",
        // Time for the step's shell to start its children on a loaded machine before the block.
        STEP_HOST_BLOCK_AFTER_MS: "2500",
      });
      try {
        await until(() => h.stepPids().length >= 3, 30_000, "the step and its children to run");
        await until(() => /^blocking$/m.test(h.output()), 60_000, "the worker to block");
        await until(() => h.stepPids().length === 0, 17_000, "the step's processes to end").catch((error: Error) => {
          throw new Error(`${error.message}: left ${describePids(h.stepPids())}; host said: ${h.output()}`);
        });
        assert.doesNotMatch(h.output(), /unblocked/, "they ended while the worker was still blocked");
        await waitForLine(h.child, /^step ended/, 60_000);
        assert.match(
          h.output(),
          /step ended: WorkerStalledError: step hosted was killed by the step warden: the worker did not run for \d+ ms/,
        );
      } finally {
        h.child.kill("SIGKILL");
      }
    });

    test("SIGSTOPped alone past the limit: the step dies; after SIGCONT the step says the warden ended it", async () => {
      const h = host(STUBBORN, { STEP_HOST_SILENCE_MS: "1000" });
      try {
        await waitForLine(h.child, /^running/, 60_000);
        await until(() => h.stepPids().length >= 3, 30_000, "the step and its children");
        process.kill(h.child.pid!, "SIGSTOP");
        await until(() => h.stepPids().length === 0, 10_000, "the step's processes to end");
        process.kill(h.child.pid!, "SIGCONT");
        await waitForLine(h.child, /^step ended/, 60_000);
        assert.match(h.output(), /step ended: WorkerStalledError: .*killed by the step warden/);
      } finally {
        h.child.kill("SIGCONT");
        h.child.kill("SIGKILL");
      }
    });

    test("the worker and its warden SIGKILLed together (`kill -9` of both, `pkill -9 node`): the step and all it started still die at once", async () => {
      const h = host(STUBBORN, { STEP_HOST_SILENCE_MS: "1000" }, { ownCgroup: true });
      try {
        await waitForLine(h.child, /^running/, 60_000);
        await until(() => h.stepPids().length >= 3, 30_000, "the step and its children");
        const warden = await wardenOf(h.child.pid!);
        process.kill(warden, "SIGKILL");
        process.kill(h.child.pid!, "SIGKILL");
        await until(() => h.stepPids().length === 0, 10_000, "the step's processes to end").catch((error: Error) => {
          throw new Error(`${error.message}: left ${describePids(h.stepPids())}`);
        });
      } finally {
        h.child.kill("SIGKILL");
      }
    });

    test("its warden SIGSTOPped: the worker finds it does not answer and starts another, which still ends the step when the worker then stops", async () => {
      const h = host(STUBBORN, { STEP_HOST_SILENCE_MS: "1000" });
      let frozen: number | null = null;
      try {
        await waitForLine(h.child, /^running/, 60_000);
        await until(() => h.stepPids().length >= 3, 30_000, "the step and its children");
        frozen = await wardenOf(h.child.pid!);
        // Up and answering by now (a warden not answering since its start gets 15 s).
        await new Promise((resolve) => setTimeout(resolve, 1_500));
        process.kill(frozen, "SIGSTOP");
        await waitForLine(h.child, /step warden \(pid \d+\) did not answer/, 45_000);
        const next = await wardenOf(h.child.pid!, frozen);
        assert.notEqual(next, frozen, "another warden runs");
        process.kill(h.child.pid!, "SIGSTOP");
        await until(() => h.stepPids().length === 0, 10_000, "the step's processes to end").catch((error: Error) => {
          throw new Error(`${error.message}: left ${describePids(h.stepPids())}`);
        });
        process.kill(h.child.pid!, "SIGCONT");
        await waitForLine(h.child, /^step ended/, 60_000);
        assert.match(h.output(), /step ended: WorkerStalledError: .*killed by the step warden/);
      } finally {
        // Killed by the worker already, normally; its pid may be another process's by now.
        if (frozen !== null && isWarden(frozen)) process.kill(frozen, "SIGKILL");
        h.child.kill("SIGCONT");
        h.child.kill("SIGKILL");
      }
    });

    test("a worker that stalled since its attempt began starts no step (its job lock may be another attempt's)", async () => {
      const h = host("echo started > /dev/null", { STEP_HOST_SILENCE_MS: "1000", STEP_HOST_BLOCK_BEFORE_MS: "1500" });
      await waitForLine(h.child, /^step ended/, 60_000);
      assert.match(
        h.output(),
        /step ended: WorkerStalledError: step hosted not started: this worker did not run for \d+ ms/,
      );
    });

    test("a worker that keeps running keeps its step, however long the step takes", async () => {
      const h = host("sleep 3; echo fine", { STEP_HOST_SILENCE_MS: "1000" });
      await waitForLine(h.child, /^step ended/, 60_000);
      assert.match(h.output(), /step ended: ok/);
    });
  });

describe("real workers: the same job's next attempt takes the claim over at once", () => {
  let bed: TestBed;
  const journal = () => path.join(bed.dir, "journal.txt");
  before(async () => {
    bed = await createTestBed({
      steady: {
        output: "out/steady",
        // A long TTL: only the same job's takeover lets the next attempt in while the first is stuck.
        claim: { ttl: "60s", refreshEvery: "2s" },
        timeLimit: "2m",
        retries: { attempts: 3, backoff: "200ms", maxBackoff: "1s" },
        steps: [
          {
            name: "write",
            // TERM-deaf, writing a timestamped line every 0.1 s to a file outside its work dir.
            run: [
              "sh",
              "-c",
              'trap "" TERM; i=0; while [ $i -lt 60 ]; do echo "$CLAIMWATCH_RUN_ID $(date +%s%N)" >> "$JOURNAL"; sleep 0.1; i=$((i+1)); done',
            ],
            env: { JOURNAL: "{output}/../../journal.txt" },
            killGrace: "1s",
          },
        ],
      },
    });
  });
  after(() => bed.close());

  test("a worker SIGSTOPped alone past its job lock: its run record names the step warden's kill, not the lost lock", async () => {
    const alone = await bed.startWorker();
    try {
      const jobId = await bed.trigger("steady", { version: "v-alone" });
      const running = await bed.waitForRun(
        (r) => r.jobId === jobId && r.status === "running" && r.fence !== null,
        30_000,
        "the step running",
      );
      await until(
        () => fs.existsSync(journal()) && fs.readFileSync(journal(), "utf8").includes(running.id),
        30_000,
        "the step's first write",
      );
      // Past the 5 s job lock: the warden kills the step at 3 s, the lock runs out meanwhile.
      process.kill(alone.pid, "SIGSTOP");
      await new Promise((r) => setTimeout(r, 7_000));
      process.kill(alone.pid, "SIGCONT");
      const ended = await bed.waitForRun((r) => r.id === running.id && r.status !== "running", 60_000, "its end");
      assert.equal(ended.status, "aborted", JSON.stringify(ended));
      assert.match(
        ended.reason ?? "",
        /killed by the step warden: the worker did not run for \d+ ms/,
        ended.reason ?? "",
      );
      // The job is redelivered and rebuilt (its request is not lost); waited for here, as the
      // next test's worker would otherwise run it beside that test's job (it deferred 30 s).
      const rebuilt = await bed.waitForRun(
        (r) => r.jobId === jobId && r.attempt > running.attempt && r.status === "rebuilt",
        90_000,
        "the redelivered attempt rebuilt",
      );
      assert.ok(rebuilt);
    } finally {
      await alone.stop();
    }
  });

  test("a worker SIGSTOPped mid-step: the old step's last write comes before the next attempt's first", async () => {
    const stuck = await bed.startWorker();
    const jobId = await bed.trigger("steady", { version: "v-stuck" });
    const first = await bed.waitForRun((r) => r.jobId === jobId && r.status === "running" && r.fence !== null, 30_000);
    await until(
      () => fs.existsSync(journal()) && fs.readFileSync(journal(), "utf8").includes(first.id),
      30_000,
      "the first write",
    );
    process.kill(stuck.pid, "SIGSTOP");
    const next = await bed.startWorker();
    try {
      const taken = await bed.waitForRun(
        (r) => r.jobId === jobId && r.attempt > first.attempt && r.status === "running" && r.fence !== null,
        60_000,
        "the next attempt running",
      );
      await bed.waitForRun((r) => r.id === taken.id && r.status === "rebuilt", 60_000, "the next attempt rebuilt");
      process.kill(stuck.pid, "SIGCONT");
      await bed.waitForRun(
        (r) => r.id === first.id && r.status !== "running",
        60_000,
        "the stuck attempt's final record",
      );
      const lines = fs
        .readFileSync(journal(), "utf8")
        .trim()
        .split("\n")
        .map((line) => line.split(" "))
        .map(([run, ns]) => ({ run: run!, ms: Number(BigInt(ns!) / 1_000_000n) }));
      const old = lines.filter((l) => l.run === first.id).map((l) => l.ms);
      const fresh = lines.filter((l) => l.run === taken.id).map((l) => l.ms);
      assert.ok(old.length > 0 && fresh.length > 0, "both attempts wrote");
      assert.ok(
        Math.max(...old) < Math.min(...fresh),
        `the stuck attempt wrote until ${Math.max(...old)}, the next one from ${Math.min(...fresh)}: ` +
          `${old.filter((ms) => ms >= Math.min(...fresh)).length} writes overlapped`,
      );
    } finally {
      await stuck.stop("SIGKILL");
      await next.stop();
    }
  });
});
