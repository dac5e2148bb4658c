/**
 * The builds-shield probe's scratch directory (lib/rebuilds/steps/containment.ts): a worker killed
 * with -9 during its probe skips `finally` and leaves `claimwatch-shield-<pid namespace>-<pid>-…`
 * in the temp directory; the next worker's probe removes those of dead pids of its own PID
 * namespace, keeps those of live ones and of other namespaces (another container's pids), and
 * leaves none of its own.
 */
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import { detectContainment } from "../../lib/rebuilds/steps/containment";

test(
  "the probe removes the scratch directories of dead workers of its PID namespace, keeps live ones' and other namespaces', and leaves none of its own",
  {
    skip: process.getuid?.() !== 0 ? "the probe runs only as root" : false,
  },
  (t) => {
    const deadPid = spawnSync("sh", ["-c", "echo $$"], { encoding: "utf8" }).stdout.trim();
    const live = spawn("sleep", ["600"], { stdio: "ignore" });
    t.after(() => live.kill("SIGKILL"));
    const namespace = /\[(\d+)\]/.exec(fs.readlinkSync("/proc/self/ns/pid"))![1]!;
    const scratch = (prefix: string) => fs.mkdtempSync(path.join(os.tmpdir(), `claimwatch-shield-${prefix}-`));
    const dead = scratch(`${namespace}-${deadPid}`);
    fs.mkdirSync(path.join(dead, "builds"));
    const alive = scratch(`${namespace}-${live.pid}`);
    const elsewhere = scratch(`1${namespace}-${deadPid}`);
    for (const dir of [dead, alive, elsewhere]) t.after(() => fs.rmSync(dir, { recursive: true, force: true }));

    const containment = detectContainment("process-group");
    assert.equal(containment.builds.shielded, true, containment.detail);

    assert.equal(fs.existsSync(dead), false, `${dead} (pid ${deadPid} is gone) was left`);
    assert.equal(fs.existsSync(alive), true, `${alive} (pid ${live.pid} is alive) was removed`);
    assert.equal(fs.existsSync(elsewhere), true, `${elsewhere} (another PID namespace's pid) was removed`);
    const own = fs
      .readdirSync(os.tmpdir())
      .filter((name) => name.startsWith(`claimwatch-shield-${namespace}-${process.pid}-`));
    assert.deepEqual(own, []);
  },
);
