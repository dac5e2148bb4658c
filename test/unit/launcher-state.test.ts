/** Recognising what a dead launcher left: same boot, pid and start time, never this process. */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, test } from "node:test";
import {
  currentBootId,
  isLauncherRunning,
  isSameProcess,
  ownedProcess,
  readLauncherState,
  stopOrphans,
  writeLauncherState,
  type LauncherState,
} from "../../lib/launcher/state";

const dir = fs.mkdtempSync(path.join(os.tmpdir(), "claimwatch-launcher-state-"));
const sleeper = spawn("sleep", ["60"], { detached: true, stdio: "ignore" });
after(() => {
  if (sleeper.exitCode === null && sleeper.signalCode === null) sleeper.kill("SIGKILL");
  fs.rmSync(dir, { recursive: true, force: true });
});

test("a recorded process is recognised by boot, pid and start time — a reused pid or another boot is not", () => {
  const boot = currentBootId();
  assert.ok(boot, "Linux: /proc/sys/kernel/random/boot_id");
  const child = ownedProcess("worker", sleeper.pid!);
  assert.ok(child.startTime !== null);
  assert.equal(isSameProcess(child, boot), true);
  assert.equal(
    isSameProcess({ ...child, startTime: child.startTime! + 1 }, boot),
    false,
    "another start time: a reused pid",
  );
  assert.equal(isSameProcess(child, "another-boot"), false, "recorded before a reboot");
  assert.equal(isSameProcess(ownedProcess("launcher", process.pid), boot), false, "never this process");
});

test("the launcher counts as running only while it is the recorded process; without /proc data, while its pid lives", () => {
  const boot = currentBootId();
  const state = (launcher: LauncherState["launcher"], bootId = boot): LauncherState => ({
    bootId,
    launcher,
    children: [],
  });
  assert.equal(isLauncherRunning(state(ownedProcess("launcher", sleeper.pid!))), true);
  assert.equal(isLauncherRunning(state({ name: "launcher", pid: 2 ** 22 + 7, startTime: 1 })), false, "gone");
  assert.equal(
    isLauncherRunning(state({ name: "launcher", pid: sleeper.pid!, startTime: null }, null)),
    true,
    "unrecognisable: live pid is running",
  );
  assert.equal(isLauncherRunning(state({ name: "launcher", pid: process.pid, startTime: null }, null)), false);
});

test("the record round-trips through the data dir, and stopOrphans stops the recorded child only", async () => {
  const bystander = spawn("sleep", ["60"], { detached: true, stdio: "ignore" });
  try {
    const recorded: LauncherState = {
      bootId: currentBootId(),
      launcher: { name: "launcher", pid: 2 ** 22 + 9, startTime: 1 },
      children: [ownedProcess("worker", sleeper.pid!), { ...ownedProcess("web", bystander.pid!), startTime: 1 }],
    };
    writeLauncherState(dir, recorded);
    const read = readLauncherState(dir)!;
    assert.deepEqual(read, recorded);
    const exited = new Promise((resolve) => sleeper.once("exit", resolve));
    const { stopped, stuck } = await stopOrphans(read, 5_000);
    assert.deepEqual(
      stopped.map((p) => p.name),
      ["worker"],
    );
    assert.deepEqual(stuck, []);
    await exited;
    assert.equal(bystander.exitCode, null, "a process whose start time does not match is left alone");
  } finally {
    bystander.kill("SIGKILL");
  }
});
