/**
 * The work dirs a worker has made and not yet ended (lib/rebuilds/work-dirs.ts): its stop takes
 * those of attempts that could not end (held on a frozen Redis right after making theirs; the
 * soak found one left, seed 1769727336), and only those — by a rename, so a promote of the same
 * dir either wins whole or fails (a delete racing its seal could publish an empty tree; helper-68
 * reproduced that against the first version of this).
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, test } from "node:test";
import { hashDirectory, promoteBuild } from "../../lib/rebuilds/output";
import { removeTakenWorkDirs, STOPPED_PREFIX, takeLiveWorkDirs, trackWorkDir } from "../../lib/rebuilds/work-dirs";

const scratch = fs.mkdtempSync(path.join(os.tmpdir(), "cw-work-dirs-"));
after(() => fs.rmSync(scratch, { recursive: true, force: true }));

function workDir(output: string, name: string): string {
  const full = path.join(scratch, output, ".work", name);
  fs.mkdirSync(path.join(full, "nested"), { recursive: true });
  fs.writeFileSync(path.join(full, "nested", "part.bin"), `bytes of ${name}`);
  return full;
}

test("the stop takes the tracked work dirs (renamed aside, then deleted with what is in them), and nothing else", async () => {
  const stuck = workDir("a", "run-a-a1-f3-abcdef");
  const ended = workDir("a", "run-b-a1-f4-abcdef");
  const notOurs = workDir("a", "run-c-a1-f5-abcdef");
  trackWorkDir(stuck);
  const untrack = trackWorkDir(ended);
  untrack(); // its attempt ended (and would have removed or promoted it)
  trackWorkDir(path.join(scratch, "a", ".work", "never-made"));
  const taken = await takeLiveWorkDirs();
  assert.deepEqual(taken, [path.join(scratch, "a", ".work", `${STOPPED_PREFIX}run-a-a1-f3-abcdef`)]);
  assert.equal(fs.existsSync(stuck), false, "out of its attempt's reach at once");
  await removeTakenWorkDirs(taken);
  assert.deepEqual(fs.readdirSync(path.join(scratch, "a", ".work")).sort(), [
    "run-b-a1-f4-abcdef",
    "run-c-a1-f5-abcdef",
  ]);
  assert.ok(fs.existsSync(notOurs));
  assert.deepEqual(await takeLiveWorkDirs(), [], "taken ones are no longer tracked");
});

test("a promote that renamed the dir first keeps its whole build; a stop that took it first makes the promote fail", async () => {
  const promotedFirst = workDir("b", "run-d-a1-f6-abcdef");
  const hash = await hashDirectory(promotedFirst);
  trackWorkDir(promotedFirst);
  const built = await promoteBuild(path.join(scratch, "b"), promotedFirst, hash);
  assert.deepEqual(await takeLiveWorkDirs(), [], "nothing left to take");
  assert.equal(await hashDirectory(built.path), hash, "the published build is whole");

  const takenFirst = workDir("c", "run-e-a1-f7-abcdef");
  const otherHash = await hashDirectory(takenFirst);
  trackWorkDir(takenFirst);
  const taken = await takeLiveWorkDirs();
  assert.equal(taken.length, 1);
  await assert.rejects(promoteBuild(path.join(scratch, "c"), takenFirst, otherHash), { code: "ENOENT" });
  assert.equal(fs.existsSync(path.join(scratch, "c", "builds", otherHash)), false, "no build under that hash");
  await removeTakenWorkDirs(taken);
});
