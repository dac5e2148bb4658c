/**
 * Step containment with real processes: background writers, double-forked `setsid` daemons and
 * SIGTERM-deaf children end with their step — on success, failure, time limit and abort — and a
 * daemon holding stdout cannot hang the step. Asserts on /proc (a marker in the environment) and
 * on files, never on logs.
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { describe, test } from "node:test";
import type { RunStep } from "../../lib/rebuilds/definitions";
import { detectContainment, type Containment } from "../../lib/rebuilds/steps/containment";
import type { StepContext } from "../../lib/rebuilds/steps/context";
import { buildsNamespace } from "../../lib/rebuilds/steps/builds-namespace";
import { runCommandStep, stepTestHooks } from "../../lib/rebuilds/steps/run-step";
import { newMarker, pidsWithMarker, waitUntilNoMarker } from "../support/markers";
import { stepTestBed } from "../support/step-bed";
import { until } from "../support/until";

const bed = stepTestBed("cw-contain-");
/** Every test below runs under both strong modes; the worker picks `cgroup` on this host. */
const MODES = ["cgroup", "pid-namespace"] as const;

function step(script: string, extra: Partial<RunStep> = {}): RunStep {
  return { name: "s", run: ["sh", "-c", script], transientExitCodes: [], killGrace: 3_000, limits: {}, ...extra };
}

function context(signal: AbortSignal): StepContext & { lines: string[] } {
  const lines: string[] = [];
  return { ...bed.context({ signal, log: (line) => lines.push(line) }), lines };
}

/** Every kind of escapee at once: a background writer, a double-forked setsid daemon, a TERM-deaf child. */
const ESCAPEES = [
  '(sleep 2; echo late > "$CLAIMWATCH_WORK/late.txt") &',
  "(setsid sh -c 'sleep 2; echo daemon > \"$CLAIMWATCH_WORK/daemon.txt\"; sleep 600' &) &",
  "(trap '' TERM; sleep 600) &",
  "setsid sleep 600 &",
].join("\n");

async function runWithIn(
  script: string,
  marker: { name: string; value: string },
  signal: AbortSignal,
  extra: Partial<RunStep> = {},
  containment: Containment = detectContainment(),
) {
  const s = step(script, { env: { [marker.name]: marker.value }, ...extra });
  const ctx = context(signal);
  const error = await runCommandStep(s, ctx, containment).then(
    () => null,
    (e: unknown) => e as Error,
  );
  return { error, ctx };
}

test("the host offers a cgroup per step (CI runs as root with a writable cgroup v2), and a PID namespace", () => {
  const auto = detectContainment("auto");
  assert.equal(auto.mode, "cgroup", auto.detail);
  assert.equal(auto.forLimitedSteps?.mode, "pid-namespace", auto.detail);
  assert.equal(detectContainment("pid-namespace").mode, "pid-namespace");
  // As root, steps see published builds read-only (a mount namespace per worker) in both strong modes.
  if (process.getuid?.() === 0) {
    assert.equal(auto.builds.shielded, true, auto.detail);
    assert.equal(auto.forLimitedSteps?.builds.shielded, true, auto.detail);
    assert.match(auto.detail, /published builds read-only to steps/);
    // The shield does not depend on the mode: a process group gets it too.
    const group = detectContainment("process-group");
    assert.equal(group.builds.shielded, true, group.detail);
    assert.match(group.detail, /published builds read-only to steps/);
  }
});

for (const mode of MODES)
  describe(`step containment (${mode})`, () => {
    const containment = detectContainment(mode);
    /** `script` as a step of the output `outputDir` ($OUT), in `workDir` if given; it must succeed: its stdout lines. */
    const stdoutOf = async (script: string, outputDir: string, workDir?: string): Promise<string[]> => {
      const ctx = context(new AbortController().signal);
      const error = await runCommandStep(
        step(script, { env: { OUT: outputDir } }),
        { ...ctx, outputDir, ...(workDir ? { workDir } : {}) },
        containment,
      ).then(
        () => null,
        (e: unknown) => e as Error,
      );
      assert.equal(error, null, ctx.lines.join("\n"));
      return ctx.lines.filter((l) => !l.includes("stderr")).map((l) => l.replace(/^\[s\] /, ""));
    };
    const runWith = (
      script: string,
      marker: { name: string; value: string },
      signal: AbortSignal,
      extra: Partial<RunStep> = {},
    ) => runWithIn(script, marker, signal, extra, containment);

    for (const [outcome, tail] of [
      ["succeeded", "echo main-done"],
      ["failed", "exit 3"],
    ] as const) {
      test(`nothing the step started outlives it when it ${outcome}, and nothing writes after`, async () => {
        const marker = newMarker();
        const { error, ctx } = await runWith(`${ESCAPEES}\n${tail}`, marker, new AbortController().signal);
        if (outcome === "succeeded") assert.equal(error, null);
        else assert.match(String(error?.message), /exited 3/);
        // The step's grace is 3 s; the namespace ends with its program, so nothing is left at all.
        const { alive } = await waitUntilNoMarker(marker, 3_000 + 1_000);
        assert.deepEqual(alive, [], "processes of the step still alive");
        await new Promise((r) => setTimeout(r, 3_000)); // past the writers' 2 s sleep
        assert.deepEqual(fs.readdirSync(ctx.workDir), [], "a process of the step wrote after it ended");
      });
    }

    test("an abort ends a TERM-deaf step and its escapees within killGrace + 1 s", async () => {
      const marker = newMarker();
      const controller = new AbortController();
      setTimeout(() => controller.abort(new Error("claim lost")), 500);
      const started = performance.now();
      const { error } = await runWith(
        `${ESCAPEES}\ntrap '' TERM\nwhile :; do sleep 0.2; done`,
        marker,
        controller.signal,
        {
          killGrace: 2_000,
        },
      );
      assert.match(String(error?.message), /claim lost/);
      const { alive } = await waitUntilNoMarker(marker, 2_000 + 1_000);
      assert.deepEqual(alive, []);
      // The step did not return before its grace had run out (it ignores SIGTERM).
      assert.ok(performance.now() - started >= 2_400, "the step returned before SIGKILL");
    });

    test("a TERM-obeying program ends on SIGTERM without waiting for the grace", async () => {
      const marker = newMarker();
      const controller = new AbortController();
      setTimeout(() => controller.abort(new Error("cancelled")), 300);
      const started = performance.now();
      const { error } = await runWith("sleep 600", marker, controller.signal, { killGrace: 60_000 });
      assert.match(String(error?.message), /cancelled/);
      assert.ok(performance.now() - started < 30_000, "SIGTERM did not reach the program (pid 1 of the namespace?)");
      assert.deepEqual(pidsWithMarker(marker), []);
    });

    test("an abort right after the spawn (nsenter not yet exec'd, no init yet) reaches the program, or it never starts", async () => {
      const marker = newMarker();
      const controller = new AbortController();
      const started = performance.now();
      // The abort lands in the turn right after the spawn, while the step starts.
      stepTestHooks.beforeSpawn = () => {
        stepTestHooks.beforeSpawn = undefined;
        setImmediate(() => controller.abort(new Error("deploy")));
      };
      const { error } = await runWith("trap 'exit 0' TERM\nsleep 60 &\nwait", marker, controller.signal, {
        killGrace: 60_000,
      });
      assert.match(String(error?.message), /deploy/);
      // A SIGTERM that reached no program would be lost: the step would wait out its grace.
      assert.ok(performance.now() - started < 30_000, "the program did not get its SIGTERM");
      assert.deepEqual(pidsWithMarker(marker), []);
    });

    test("a daemon holding stdout does not hang the step (setsid sleep 600 & echo started)", async () => {
      const marker = newMarker();
      const { error, ctx } = await runWith("setsid sleep 600 & echo started", marker, new AbortController().signal, {
        killGrace: 60_000,
      });
      assert.equal(error, null);
      assert.ok(ctx.lines.some((l) => l.endsWith("started")));
      assert.deepEqual(pidsWithMarker(marker), []);
    });

    test("a root step sees published builds read-only: a write into one, or a new build, fails (EROFS); its work dir stays writable", async (t) => {
      if (process.getuid?.() !== 0) return t.skip("write bits already stop a non-root step");
      assert.equal(containment.builds.shielded, true, containment.detail);
      const outputDir = fs.mkdtempSync(path.join(bed.dir, "output-"));
      const build = path.join(outputDir, "builds", "h1");
      fs.mkdirSync(build, { recursive: true });
      fs.writeFileSync(path.join(build, "tile"), "published\n");
      fs.chmodSync(path.join(build, "tile"), 0o444);
      fs.chmodSync(build, 0o555);
      fs.symlinkSync("builds/h1", path.join(outputDir, "current"));
      const script = [
        'echo changed > "$OUT/current/tile" && echo wrote-current',
        'echo changed > "$OUT/builds/h1/tile" && echo wrote-build',
        'mkdir "$OUT/builds/h2" && echo made-build',
        'rm -f "$OUT/builds/h1/tile" && echo removed',
        'echo mine > "$CLAIMWATCH_WORK/out.txt" && echo wrote-work',
        'cat "$OUT/current/tile"',
      ].join("\n");
      const ctx = context(new AbortController().signal);
      const error = await runCommandStep(
        step(script, { env: { OUT: outputDir } }),
        { ...ctx, outputDir },
        containment,
      ).then(
        () => null,
        (e: unknown) => e as Error,
      );
      assert.equal(error, null);
      const out = ctx.lines.filter((l) => !l.includes("stderr")).map((l) => l.replace(/^\[s\] /, ""));
      assert.deepEqual(out, ["wrote-work", "published"], ctx.lines.join("\n"));
      assert.ok(
        ctx.lines.some((l) => /Read-only file system/.test(l)),
        ctx.lines.join("\n"),
      );
      assert.equal(fs.readFileSync(path.join(build, "tile"), "utf8"), "published\n");
      assert.deepEqual(fs.readdirSync(path.join(outputDir, "builds")), ["h1"]);
      assert.equal(fs.readFileSync(path.join(ctx.workDir, "out.txt"), "utf8"), "mine\n");
      // The read-only mount was the step's own: the worker's view of builds/ is unchanged.
      const mounts = fs.readFileSync("/proc/self/mountinfo", "utf8");
      assert.ok(
        !mounts.includes(path.join(outputDir, "builds")),
        "the step's mount leaked into the worker's namespace",
      );
      fs.writeFileSync(path.join(outputDir, "builds", "worker-can-write"), "");
    });

    test("the namespace is the worker's view: a relative path from the work dir finds builds read-only, a step's own mounts do not reach the next step, the worker's new mounts do", async (t) => {
      if (process.getuid?.() !== 0) return t.skip("write bits already stop a non-root step");
      const outputDir = fs.mkdtempSync(path.join(bed.dir, "output-"));
      fs.mkdirSync(path.join(outputDir, "builds", "h1"), { recursive: true });
      const run = (script: string, name: string) => {
        const workDir = path.join(outputDir, ".work", name);
        fs.mkdirSync(workDir, { recursive: true });
        return stdoutOf(script, outputDir, workDir);
      };
      // From its default working directory, `..` climbs inside the namespace, not the worker's view.
      assert.deepEqual(
        await run(
          "touch ../../builds/h1/rel 2>/dev/null && echo wrote || echo refused; mkdir ../../builds/h2 2>/dev/null && echo made || echo refused",
          "r1",
        ),
        ["refused", "refused"],
      );
      assert.deepEqual(fs.readdirSync(path.join(outputDir, "builds")), ["h1"]);
      // A step mounts a tmpfs over the work directories (and leaves it): the next step's writes
      // must land where the worker reads them.
      assert.deepEqual(await run('mount -t tmpfs scratch "$OUT/.work" && echo mounted', "r2"), ["mounted"]);
      assert.deepEqual(await run('echo built > "$CLAIMWATCH_WORK/artifact" && echo wrote', "r3"), ["wrote"]);
      assert.equal(fs.readFileSync(path.join(outputDir, ".work", "r3", "artifact"), "utf8"), "built\n");
      // The worker mounts something after the namespace was made: the next step sees it.
      const data = path.join(outputDir, "data");
      fs.mkdirSync(data);
      execFileSync("mount", ["-t", "tmpfs", "late", data]);
      t.after(() => execFileSync("umount", ["-l", data]));
      fs.writeFileSync(path.join(data, "seen"), "yes\n");
      assert.deepEqual(await run('cat "$OUT/data/seen"', "r4"), ["yes"]);
      assert.ok(!fs.readFileSync("/proc/self/mountinfo", "utf8").includes(path.join(outputDir, "builds")));
      // A shared mount over the output (a disk mounted late) propagates into the namespace and
      // hides its bind there: the next step must still find builds/ read-only.
      const shared = fs.mkdtempSync(path.join(bed.dir, "shared-"));
      execFileSync("mount", ["--bind", shared, shared]);
      execFileSync("mount", ["--make-shared", shared]);
      // Every mount stacked there (the bind, the tmpfs), before the bed's directory is removed.
      t.after(() => execFileSync("sh", ["-c", 'while mountpoint -q "$1"; do umount -l "$1"; done', "unmount", shared]));
      fs.mkdirSync(path.join(shared, "out", "builds"), { recursive: true });
      const sharedOut = path.join(shared, "out");
      const write = 'touch "$OUT/builds/x" 2>/dev/null && echo wrote || echo refused';
      const runIn = (out: string) => stdoutOf(write, out);
      assert.deepEqual(await runIn(sharedOut), ["refused"]);
      execFileSync("mount", ["-t", "tmpfs", "late-disk", shared]);
      fs.mkdirSync(path.join(shared, "out", "builds"), { recursive: true });
      assert.deepEqual(await runIn(sharedOut), ["refused"]);
      assert.deepEqual(fs.readdirSync(path.join(sharedOut, "builds")), []);
    });

    test("builds stay read-only to the next step after a step unmounts them, the directory is made again, or the namespace's holder dies", async (t) => {
      if (process.getuid?.() !== 0) return t.skip("write bits already stop a non-root step");
      const outputDir = fs.mkdtempSync(path.join(bed.dir, "output-"));
      const builds = path.join(outputDir, "builds");
      fs.mkdirSync(builds);
      const tries = (script: string) => stdoutOf(script, outputDir);
      const write = 'touch "$OUT/builds/x" 2>/dev/null && echo wrote || echo refused';
      assert.deepEqual(await tries(write), ["refused"]);
      // A root step takes the mount away (it is shared by the worker's steps): the next gets it back.
      assert.deepEqual(await tries(`umount "$OUT/builds" && echo unmounted; ${write}`), ["unmounted", "wrote"]);
      fs.rmSync(path.join(builds, "x"));
      assert.deepEqual(await tries(write), ["refused"]);
      // builds/ removed and made again (a new directory: the old mount went with the old one).
      fs.rmSync(builds, { recursive: true });
      fs.mkdirSync(builds);
      assert.deepEqual(await tries(write), ["refused"]);
      // The holder of the namespace dies: the next step gets a new namespace, as read-only.
      const holder = buildsNamespace.holderPid;
      assert.ok(holder !== null);
      process.kill(holder, "SIGKILL");
      await until("the holder's end", async () => buildsNamespace.holderPid !== holder, 10_000);
      assert.deepEqual(await tries(write), ["refused"]);
      assert.notEqual(buildsNamespace.holderPid, holder);
      assert.deepEqual(fs.readdirSync(builds), []);
      assert.ok(!fs.readFileSync("/proc/self/mountinfo", "utf8").includes(builds), "a mount leaked to the worker");
    });

    test("the step's environment reaches the program: a PATH of its own, and names the wrappers' shells use", async () => {
      const marker = newMarker();
      const env = { PATH: "/nonexistent", ro: "mine", cg: "mine", d: "mine" };
      const { error, ctx } = await runWith("", marker, new AbortController().signal, {
        run: ["/usr/bin/env"],
        env: { ...env, [marker.name]: marker.value },
      });
      assert.equal(error, null, ctx.lines.join("\n"));
      const seen = new Map(ctx.lines.map((l) => l.replace(/^\[s\] /, "").split(/=(.*)/s) as [string, string]));
      for (const [name, value] of Object.entries(env)) assert.equal(seen.get(name), value, name);
      if (mode === "cgroup") {
        // A name that is no shell identifier: dash would drop it (the namespace's init still does).
        const dotted = await runWith("", marker, new AbortController().signal, {
          run: ["/usr/bin/printenv", "spring.profiles.active"],
          env: { "spring.profiles.active": "prod", [marker.name]: marker.value },
        });
        assert.equal(dotted.error, null, dotted.ctx.lines.join("\n"));
        assert.deepEqual(dotted.ctx.lines, ["[s] prod"]);
      }
    });

    test("exit codes and signals of the program come through", async () => {
      const marker = newMarker();
      const transient = await runWith("exit 75", marker, new AbortController().signal, { transientExitCodes: [75] });
      assert.equal(transient.error?.name, "TransientStepError");
      // A program's own "not found" line after its first is its own, with its declared code.
      const inner = await runWith(
        "echo starting >&2; echo \"env: 'python3': No such file or directory\" >&2; exit 127",
        marker,
        new AbortController().signal,
        { transientExitCodes: [127] },
      );
      assert.equal(inner.error?.name, "TransientStepError", String(inner.error));
      // 126 and 127 from the program itself are its own codes, not "not found".
      for (const code of [126, 127]) {
        const own = await runWith(`exit ${code}`, marker, new AbortController().signal, { transientExitCodes: [code] });
        assert.equal(own.error?.name, "TransientStepError", String(own.error));
        const plain = await runWith(`exit ${code}`, marker, new AbortController().signal);
        assert.match(String(plain.error?.message), new RegExp(`exited ${code}`));
      }
      const killed = await runWith("kill -9 $$", marker, new AbortController().signal);
      assert.match(String(killed.error?.message), /killed by SIGKILL/);
      const missing = await runWith("", marker, new AbortController().signal, { run: ["/no/such/program"] });
      assert.match(String(missing.error?.message), /not found/);
    });

    test("a step over its pids limit fails with the reason, and its cgroup is removed", async (t) => {
      if (!containment.limits.pids) return t.skip("no pids controller on this host");
      const marker = newMarker();
      const { error } = await runWith(
        "for i in $(seq 40); do sleep 5 & done; wait",
        marker,
        new AbortController().signal,
        {
          limits: { pids: 8 },
        },
      );
      assert.match(String(error?.message), /hit its limit of 8 processes/);
      assert.deepEqual(pidsWithMarker(marker), []);
      assert.deepEqual(
        fs.readdirSync(containment.limits.pids).filter((d) => d.includes(`-${process.pid}`)),
        [],
        "the step's cgroup was left behind",
      );
    });

    test("a step over its memory limit fails with the reason", async (t) => {
      if (!containment.limits.memory) return t.skip("no memory controller on this host");
      const marker = newMarker();
      const hog = `${JSON.stringify(process.execPath)} -e "const a = []; for (;;) a.push(Buffer.alloc(1 << 20, 1))"`;
      const { error } = await runWith(hog, marker, new AbortController().signal, {
        limits: { memory: 96 * 1024 ** 2 },
      });
      assert.match(String(error?.message), /exceeded its memory limit of 96 MiB/);
      assert.deepEqual(pidsWithMarker(marker), []);
    });

    test("the program gets one SIGTERM (not one from the group and one from the init), with SIGINT and SIGQUIT at their defaults", async () => {
      const marker = newMarker();
      const controller = new AbortController();
      const script = [
        "n=0; trap 'n=$((n+1)); echo \"term $n\"' TERM",
        'grep -E "^SigIgn" /proc/self/status',
        "i=0; while [ $i -lt 20 ]; do sleep 0.1; i=$((i+1)); done; exit 0",
      ].join("\n");
      setTimeout(() => controller.abort(new Error("abort")), 600);
      const { error, ctx } = await runWith(script, marker, controller.signal, { killGrace: 10_000 });
      assert.match(String(error?.message), /abort/);
      assert.ok(
        ctx.lines.some((l) => /SigIgn:\s+0+$/.test(l)),
        ctx.lines.join("\n"),
      );
      assert.equal(ctx.lines.filter((l) => /term \d/.test(l)).length, 1, ctx.lines.join("\n"));
    });
  });

test("a bad CLAIMWATCH_STEP_CONTAINMENT stops the worker with one line naming it", async () => {
  const { spawnSync } = await import("node:child_process");
  const result = spawnSync(process.execPath, ["--import", "tsx", "worker/index.ts"], {
    env: { ...process.env, CLAIMWATCH_STEP_CONTAINMENT: "chroot", REDIS_URL: "redis://127.0.0.1:1" },
    encoding: "utf8",
    timeout: 60_000,
  });
  assert.equal(result.status, 2, result.stderr);
  assert.match(
    result.stderr.trim(),
    /^claimwatch-worker: configuration error: CLAIMWATCH_STEP_CONTAINMENT="chroot": must be auto/,
  );
  assert.equal(result.stderr.trim().split("\n").length, 1);
});

describe("a worker that dies while its step runs", () => {
  async function hostAndKill(script: string, env: Record<string, string>) {
    const { spawn } = await import("node:child_process");
    const { waitForLine } = await import("../support/processes");
    const marker = newMarker();
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "cw-step-host-"));
    try {
      const host = spawn(process.execPath, ["--import", "tsx", "test/support/step-host.ts", script, "30000"], {
        env: { ...process.env, ...env, [marker.name]: marker.value, STEP_HOST_DIR: dir },
        stdio: ["ignore", "pipe", "pipe"],
      });
      await waitForLine(host, env.STEP_ABORT_AFTER_MS ? /^aborted/ : /^running/, 60_000);
      // The step starts once the host's warden (started with it) has answered: a moment, on a loaded host.
      await until("the step and its children to run", async () => pidsWithMarker(marker).length >= 3, 15_000);
      // As root, the holder of the host's namespace for read-only builds (`cat`, its child).
      const holders = fs
        .readFileSync(`/proc/${host.pid}/task/${host.pid}/children`, "utf8")
        .trim()
        .split(/\s+/)
        .filter((pid) => pid && fs.readlinkSync(`/proc/${pid}/exe`).endsWith("/cat"));
      assert.equal(holders.length, process.getuid?.() === 0 ? 1 : 0, "one holder of the builds namespace");
      host.kill("SIGKILL");
      // killGrace is 30 s: only the pipe watcher ends them within a few seconds.
      const result = await waitUntilNoMarker(marker, 5_000);
      // The holder ends with its worker (end of file on its stdin).
      await until("the holder's end", async () => holders.every((pid) => !fs.existsSync(`/proc/${pid}`)), 5_000);
      return result;
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  }
  const deaf = "(trap '' TERM; sleep 600) & trap '' TERM; while :; do sleep 0.2; done";

  for (const mode of MODES) {
    test(`${mode}: killed during an abort's grace period: the step still dies at once (the warden ignores the SIGTERM)`, async () => {
      const { alive } = await hostAndKill(`echo up; ${deaf}`, {
        STEP_ABORT_AFTER_MS: "300",
        CLAIMWATCH_STEP_CONTAINMENT: mode,
      });
      assert.deepEqual(alive, []);
    });

    test(`${mode}: a program that kills its own group (kill 0) does not disarm the warden`, async () => {
      const { alive } = await hostAndKill(`trap '' TERM; kill -TERM 0; ${deaf}`, { CLAIMWATCH_STEP_CONTAINMENT: mode });
      assert.deepEqual(alive, []);
    });
  }

  test("process-group mode: the step's children die with the worker too", async () => {
    const { alive } = await hostAndKill(deaf, { CLAIMWATCH_STEP_CONTAINMENT: "process-group" });
    assert.deepEqual(alive, []);
  });
});
