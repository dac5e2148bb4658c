/**
 * Holding marks (lib/rebuilds/holding-marks.ts) on a real directory: who is waited out, for how
 * long, and what raises the next grant.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, test } from "node:test";
import { markHolding, otherHolders } from "../../lib/rebuilds/holding-marks";
import { readFenceFloor, recordPublishedFence } from "../../lib/rebuilds/published-fence";

const root = fs.mkdtempSync(path.join(os.tmpdir(), "claimwatch-holding-"));
after(() => fs.rmSync(root, { recursive: true, force: true }));
let outputs = 0;
const newOutput = () => path.join(root, `out-${++outputs}`);

/** Sets a mark's mtime `ageMs` before its own holder's (as if it was last rewritten then). */
function age(output: string, fence: number, token: string, ageMs: number): void {
  const name = fs.readdirSync(path.join(output, "builds")).find((n) => n.startsWith(`.holding-fence@${fence}.`))!;
  const at = new Date(Date.now() - ageMs);
  fs.utimesSync(path.join(output, "builds", name), at, at);
  assert.ok(name.endsWith(token.slice(-16)), name);
}

test("a fresh mark of another holder is waited out for its own hold; a stale one, a known one and the own one are not", async () => {
  const output = newOutput();
  const a = await markHolding(output, 7, "host:1:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", 9_000);
  age(output, 7, "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", 2_000);
  const b = { fence: 8, token: "host:2:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb", holdMs: 3_000 };
  await markHolding(output, b.fence, b.token, b.holdMs);

  const seen = await otherHolders(output, b);
  assert.deepEqual(seen.fences, [7]);
  // A's own hold (9 s, from its file) counts, not B's: about 7 s are left of it, plus 2 s for
  // filesystems with whole-second mtimes.
  assert.ok(seen.waitMs > 8_000 && seen.waitMs <= 9_100, String(seen.waitMs));
  assert.equal(seen.highestFence, 7);

  // The earlier attempt this grant took over from is the takeover's business.
  assert.equal((await otherHolders(output, b, ["host:1:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"])).waitMs, 0);

  // Last rewritten longer ago than its hold: its holder has stopped.
  age(output, 7, "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", 12_000);
  assert.deepEqual(await otherHolders(output, b), { waitMs: 0, fences: [], highestFence: 7 });

  // A touch makes it fresh again; a removal ends the wait.
  await a.touch();
  assert.ok((await otherHolders(output, b)).waitMs > 8_000);
  await a.remove();
  assert.deepEqual(await otherHolders(output, b), { waitMs: 0, fences: [], highestFence: 0 });
  // A refresh under way when its holder removed the mark touches nothing, and is no error.
  await a.touch();
  assert.deepEqual(await otherHolders(output, b), { waitMs: 0, fences: [], highestFence: 0 }, "not written again");
});

test("a mark removed by someone else (a higher fence's publish, a hand) fails its holder's next touch", async () => {
  const output = newOutput();
  const mark = await markHolding(output, 4, "host:1:dddddddddddddddddddddddddddddddd", 9_000);
  const name = fs.readdirSync(path.join(output, "builds")).find((n) => n.startsWith(".holding-fence@4."))!;
  fs.rmSync(path.join(output, "builds", name));
  await assert.rejects(mark.touch(), /ENOENT/);
  assert.ok(!fs.existsSync(path.join(output, "builds", name)), "not created again");
});

test("a fresh mark whose holder's process is gone (this host) is not waited for; one of a live process is", async () => {
  const output = newOutput();
  await markHolding(output, 3, "host:1:eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee", 60_000);
  const name = fs.readdirSync(path.join(output, "builds")).find((n) => n.startsWith(".holding-fence@3."))!;
  const file = path.join(output, "builds", name);
  const own = { fence: 4, token: "host:2:ffffffffffffffffffffffffffffffff", holdMs: 1_000 };
  await markHolding(output, own.fence, own.token, own.holdMs);
  assert.deepEqual((await otherHolders(output, own)).fences, [3], "this process is alive");

  const gone = spawnSync("sh", ["-c", "echo $$"], { encoding: "utf8" });
  const content = JSON.parse(fs.readFileSync(file, "utf8")) as { pid: number; start: string };
  fs.writeFileSync(file, JSON.stringify({ ...content, pid: Number(gone.stdout.trim()) }));
  assert.deepEqual(await otherHolders(output, own), { waitMs: 0, fences: [], highestFence: 3 });

  // Another host's (or pid namespace's) holder cannot be looked at: waited for.
  fs.writeFileSync(file, JSON.stringify({ ...content, pid: Number(gone.stdout.trim()), boot: "another-host" }));
  assert.deepEqual((await otherHolders(output, own)).fences, [3]);
});

test("holding marks raise the fence floor, and a publish's record removes those it covers", async () => {
  const output = newOutput();
  assert.equal(await readFenceFloor(output), 0);
  await markHolding(output, 12, "host:1:cccccccccccccccccccccccccccccccc", 1_000);
  assert.equal(await readFenceFloor(output), 12, "a holder's fence is not granted again");
  const higher = await markHolding(output, 14, "host:1:dddddddddddddddddddddddddddddddd", 1_000);
  fs.mkdirSync(path.join(output, "builds", "b".repeat(32)), { recursive: true });
  assert.equal((await recordPublishedFence(output, 13, "b".repeat(32))).status, "recorded");
  const left = fs.readdirSync(path.join(output, "builds")).filter((n) => n.startsWith(".holding-fence@"));
  assert.deepEqual(
    left.map((n) => n.split(".")[1]),
    ["holding-fence@14"],
    "the mark of fence 12 went with the record of 13; 14's holder may still run",
  );
  assert.equal(await readFenceFloor(output), 14);
  await higher.remove();
  assert.equal(await readFenceFloor(output), 13);
});
