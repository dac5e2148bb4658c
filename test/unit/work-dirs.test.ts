/**
 * The work dirs a worker has made and not yet ended (lib/rebuilds/work-dirs.ts): its stop removes
 * those of attempts that could not end (held on a frozen Redis right after making theirs; the
 * soak found one left, seed 1769727336), and only those.
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, test } from "node:test";
import { removeLiveWorkDirs, trackWorkDir } from "../../lib/rebuilds/work-dirs";

const scratch = fs.mkdtempSync(path.join(os.tmpdir(), "cw-work-dirs-"));
after(() => fs.rmSync(scratch, { recursive: true, force: true }));

test("the stop removes the tracked work dirs with what is in them, and nothing else", async () => {
  const dir = (name: string) => {
    const full = path.join(scratch, "out", ".work", name);
    fs.mkdirSync(path.join(full, "nested"), { recursive: true });
    fs.writeFileSync(path.join(full, "nested", "part.bin"), "x");
    return full;
  };
  const stuck = dir("run-a-a1-f3-abcdef");
  const ended = dir("run-b-a1-f4-abcdef");
  const notOurs = dir("run-c-a1-f5-abcdef");
  trackWorkDir(stuck);
  const untrack = trackWorkDir(ended);
  untrack(); // its attempt ended (and would have removed or promoted it)
  trackWorkDir(path.join(scratch, "out", ".work", "never-made"));
  assert.equal(await removeLiveWorkDirs(), 2);
  assert.equal(fs.existsSync(stuck), false);
  assert.equal(fs.existsSync(ended), true, "an untracked dir is not the stop's");
  assert.equal(fs.existsSync(notOurs), true);
  assert.equal(await removeLiveWorkDirs(), 0, "removed ones are no longer tracked");
});
