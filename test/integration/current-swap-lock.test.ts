/**
 * `current` never goes back over a newer fence's build, whoever swaps it late (black-box
 * helper-146): a holder held up inside its swap (a slow `symlink`, a pause) while a newer
 * publisher records and swaps used to rename its older link over the newer one afterwards, and
 * `current` served the older build until its re-check followed the record again (13 s there).
 * Swaps of one output now exclude each other (flock on `<output>/.current.lock`, held by a
 * companion process: lib/rebuilds/current-lock.ts), and the record is read inside the lock.
 * Real processes: the late swapper is a child held back by strace; a poller reads `current`.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, test, type TestContext } from "node:test";
import { fileURLToPath } from "node:url";
import { CurrentLockBusyError, lockCurrent } from "../../lib/rebuilds/current-lock";
import { CurrentSwapError, readCurrent } from "../../lib/rebuilds/output";
import { pointCurrentAtRecord, recordPublishedFence } from "../../lib/rebuilds/published-fence";
import { injectInto } from "../support/strace";
import { until } from "../support/until";

const HOST = fileURLToPath(new URL("../support/swap-current-host.ts", import.meta.url));
const root = fs.mkdtempSync(path.join(os.tmpdir(), "claimwatch-swaplock-"));
after(() => fs.rmSync(root, { recursive: true, force: true }));

const hashOf = (n: number) => n.toString(16).padStart(32, "0");

/** An output with builds for fences 1..n (`builds/<hash>`, each with one file). */
function outputWithBuilds(name: string, fences: number[]): string {
  const output = path.join(root, name);
  for (const fence of fences) {
    fs.mkdirSync(path.join(output, "builds", hashOf(fence)), { recursive: true });
    fs.writeFileSync(path.join(output, "builds", hashOf(fence), "v"), String(fence));
  }
  return output;
}

/**
 * A child swapping `current` to `fence`'s build (`swap`) with its link creation held back
 * `delayMs` by strace, once it is inside that held-back `symlink`.
 */
async function lateSwapper(t: TestContext, output: string, fence: number, delayMs: number) {
  const child = spawn(process.execPath, ["--import", "tsx", HOST, "swap", output, String(fence), hashOf(fence)], {
    stdio: ["pipe", "pipe", "inherit"],
  });
  t.after(() => child.exitCode === null && child.kill("SIGKILL"));
  let out = "";
  child.stdout.on("data", (chunk: Buffer) => (out += chunk.toString()));
  const exited = new Promise((resolve) => child.once("exit", resolve));
  const stopTracing = await injectInto(t, child.pid!, [
    "-e",
    "trace=symlink,symlinkat",
    "-e",
    `inject=symlink,symlinkat:delay_enter=${delayMs * 1_000}`,
  ]);
  t.after(stopTracing);
  child.stdin.write("go\n");
  await until("the child is swapping", async () => out.includes("SWAPPING"));
  await new Promise((r) => setTimeout(r, 500)); // inside its held-back symlink
  return { child, out: () => out, exited, stopTracing };
}

/** Every value `current` takes, read every few ms until `stop()`. */
function watchCurrent(output: string): { seen: (string | null)[]; stop: () => void } {
  const seen: (string | null)[] = [];
  let running = true;
  void (async () => {
    while (running) {
      const now = await readCurrent(output);
      if (seen.at(-1) !== now) seen.push(now);
      await new Promise((r) => setTimeout(r, 5));
    }
  })();
  return { seen, stop: () => (running = false) };
}

test("a swapper held up inside its swap while a newer fence is recorded and swapped: current never goes back to the older build", async (t) => {
  const output = outputWithBuilds("late", [64, 65]);
  assert.deepEqual(await recordPublishedFence(output, 64, hashOf(64)), { status: "recorded" });
  const watch = watchCurrent(output);
  t.after(watch.stop);
  // Its link creation held back 4 s: the late swapper is inside its swap when the newer comes.
  const { out, exited, stopTracing } = await lateSwapper(t, output, 64, 4_000);
  // The newer publisher: records fence 65, then swaps (waiting for the late one's swap to end:
  // its own, then its follow of the newer record, each held back 4 s).
  assert.deepEqual(await recordPublishedFence(output, 65, hashOf(65)), { status: "recorded" });
  await pointCurrentAtRecord(output, 65, hashOf(65), { lockWaitMs: 60_000 });
  await exited;
  stopTracing();
  await new Promise((r) => setTimeout(r, 200));
  watch.stop();
  assert.match(out(), /SWAPPED/, out());
  assert.equal(await readCurrent(output), hashOf(65));
  const afterNewer = watch.seen.slice(watch.seen.indexOf(hashOf(65)));
  assert.deepEqual(afterNewer, [hashOf(65)], `current went back after the newer build: ${watch.seen.join(" -> ")}`);
});

/** A child holding `output`'s swap lock (`hold`), once it says so. */
async function holder(t: TestContext, output: string, env: NodeJS.ProcessEnv = process.env) {
  const child = spawn(process.execPath, ["--import", "tsx", HOST, "hold", output], {
    stdio: ["pipe", "pipe", "pipe"],
    env,
  });
  t.after(() => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill("SIGCONT");
      child.kill("SIGKILL");
    }
  });
  let out = "";
  let err = "";
  child.stdout.on("data", (chunk: Buffer) => (out += chunk.toString()));
  child.stderr.on("data", (chunk: Buffer) => (err += chunk.toString()));
  await until("the child holds the lock", async () => out.includes("LOCKED"));
  return { child, out: () => out, err: () => err };
}

test("a paused swapper holds up the others for a bounded time: the swap fails as a swap (current unchanged, repair moves it), and goes through once the holder is gone", async (t) => {
  const output = outputWithBuilds("paused", [1, 2]);
  assert.deepEqual(await recordPublishedFence(output, 1, hashOf(1)), { status: "recorded" });
  await pointCurrentAtRecord(output, 1, hashOf(1));
  const held = await holder(t, output);
  assert.match(held.out(), /LOCKED exclusive/);
  held.child.kill("SIGSTOP");
  assert.deepEqual(await recordPublishedFence(output, 2, hashOf(2)), { status: "recorded" });
  // Its companion (perl, holding the kernel lock) runs on: the lock stays held while paused.
  await assert.rejects(lockCurrent(output, 300), CurrentLockBusyError);
  // Never swapped around, however long it is held (a repair that did put an older build back
  // for 34 s: black-box helper-150): a lag, said by repair, until the holder goes on or is stopped.
  await new Promise((r) => setTimeout(r, 1_000));
  await assert.rejects(lockCurrent(output, 300), CurrentLockBusyError);
  await assert.rejects(pointCurrentAtRecord(output, 2, hashOf(2), { lockWaitMs: 300 }), CurrentSwapError);
  assert.equal(await readCurrent(output), hashOf(1), "current lags, it is not swapped around the holder");
  // kill -9 of the paused holder: its companion's stdin ends, the kernel lock goes with it.
  held.child.kill("SIGKILL");
  await pointCurrentAtRecord(output, 2, hashOf(2));
  assert.equal(await readCurrent(output), hashOf(2));
});

test("a lock that excluded nothing after all (the late swapper's companion killed mid-swap): current still ends on the newest build (review helper-148)", async (t) => {
  const output = outputWithBuilds("companion-killed", [64, 65]);
  assert.deepEqual(await recordPublishedFence(output, 64, hashOf(64)), { status: "recorded" });
  const { child, out, exited } = await lateSwapper(t, output, 64, 3_000);
  // Its companion (the child's child running perl) killed: the kernel lock goes with it.
  const companions = fs
    .readdirSync("/proc")
    .filter((pid) => /^\d+$/.test(pid))
    .filter((pid) => {
      try {
        // By name: tsx may start a child of its own (esbuild's service, with a cold cache).
        const stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8");
        const parent = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
        return parent === child.pid && fs.readFileSync(`/proc/${pid}/comm`, "utf8").trim() === "perl";
      } catch {
        return false;
      }
    });
  assert.equal(companions.length, 1, `one companion of the child: ${companions.join(",")}`);
  process.kill(Number(companions[0]), "SIGKILL");
  assert.deepEqual(await recordPublishedFence(output, 65, hashOf(65)), { status: "recorded" });
  await pointCurrentAtRecord(output, 65, hashOf(65));
  await exited;
  assert.match(out(), /SWAPPED/, out());
  assert.equal(await readCurrent(output), hashOf(65), "the late swap's own re-read followed the newer record");
});

test("a newer fence recorded whose build is not on this host: current is left as it was, and the swap says so", async () => {
  const output = outputWithBuilds("newer-not-here", [1, 2]);
  assert.deepEqual(await recordPublishedFence(output, 1, hashOf(1)), { status: "recorded" });
  assert.deepEqual(await pointCurrentAtRecord(output, 1, hashOf(1)), { kind: "swapped", fence: 1, hash: hashOf(1) });
  // Fence 3 recorded (its publisher's disk, or a build lost since); fence 2 swaps late.
  assert.deepEqual(await recordPublishedFence(output, 3, hashOf(3)), { status: "recorded" });
  const outcome = await pointCurrentAtRecord(output, 2, hashOf(2));
  assert.deepEqual(outcome, { kind: "newer-not-here", newest: { fence: 3, hash: hashOf(3) }, swapped: false });
  assert.equal(await readCurrent(output), hashOf(1), "current names what it named");
  // Once its build is here, a swap follows it.
  fs.mkdirSync(path.join(output, "builds", hashOf(3)));
  assert.deepEqual(await pointCurrentAtRecord(output, 2, hashOf(2)), { kind: "swapped", fence: 3, hash: hashOf(3) });
  assert.equal(await readCurrent(output), hashOf(3));
});

test("a lock file that cannot be opened: the swap goes on unlocked, said once, and ends on the newest build", async () => {
  const output = outputWithBuilds("unopenable", [1, 2]);
  fs.symlinkSync("/proc/no-such-dir/lock", path.join(output, ".current.lock"));
  assert.deepEqual(await recordPublishedFence(output, 2, hashOf(2)), { status: "recorded" });
  const lock = await lockCurrent(output, 1_000);
  assert.equal(lock.exclusive, false);
  lock.release();
  await pointCurrentAtRecord(output, 1, hashOf(1));
  assert.equal(await readCurrent(output), hashOf(2), "a newer record is followed");
});

test("a swap that cannot get the lock in time is a CurrentSwapError at the swap, current untouched", async (t) => {
  const output = outputWithBuilds("busy", [1, 2]);
  assert.deepEqual(await recordPublishedFence(output, 1, hashOf(1)), { status: "recorded" });
  await pointCurrentAtRecord(output, 1, hashOf(1));
  await holder(t, output);
  assert.deepEqual(await recordPublishedFence(output, 2, hashOf(2)), { status: "recorded" });
  const started = Date.now();
  const swapping = pointCurrentAtRecord(output, 2, hashOf(2), { lockWaitMs: 400 });
  const error = await swapping.then(
    () => null,
    (e: unknown) => e,
  );
  assert.ok(error instanceof CurrentSwapError && error.stage === "swap", String(error));
  assert.match(String(error), /being swapped by another process/);
  assert.ok(Date.now() - started < 10_000);
  assert.equal(await readCurrent(output), hashOf(1));
});

test("without perl the swap still happens, unlocked, and says so once", async (t) => {
  const output = outputWithBuilds("noperl", [1]);
  const bin = fs.mkdtempSync(path.join(root, "bin-"));
  const held = await holder(t, output, { ...process.env, PATH: bin });
  assert.match(held.out(), /LOCKED not-exclusive/);
  assert.match(held.err(), /swaps of current are not locked .*is perl installed\?/);
});

test("a filesystem that refuses locks (flock answers ENOLCK, as NFS without a lock daemon): the swap goes on unlocked, said once, never waits as if busy (review helper-149)", async (t) => {
  const output = outputWithBuilds("nolocks", [1]);
  const child = spawn(
    "strace",
    ["-f", "-qq", "-o", "/dev/null", "-e", "trace=flock", "-e", "inject=flock:error=ENOLCK"].concat([
      process.execPath,
      "--import",
      "tsx",
      HOST,
      "hold",
      output,
    ]),
    { stdio: ["pipe", "pipe", "pipe"] },
  );
  t.after(() => child.exitCode === null && child.kill("SIGKILL"));
  let out = "";
  let err = "";
  child.stdout.on("data", (chunk: Buffer) => (out += chunk.toString()));
  child.stderr.on("data", (chunk: Buffer) => (err += chunk.toString()));
  const started = Date.now();
  await until("the child answers", async () => out.includes("LOCKED"), 60_000);
  assert.match(out, /LOCKED not-exclusive/);
  assert.match(err, /are not locked: the lock cannot be taken: flock: No locks available/);
  assert.ok(Date.now() - started < 30_000);
  child.stdin.end();
});
