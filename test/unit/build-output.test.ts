/**
 * What a published build is: exactly the bytes its hash names, read-only, self-contained.
 * Real files in a temp dir.
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, test } from "node:test";
import {
  BuildContentError,
  hashDirectory,
  makeDirectory,
  outputTempName,
  promoteBuild,
  pruneBuilds,
  pruneLeftTemps,
  verifyBuilds,
} from "../../lib/rebuilds/output";
import { readPublishedFence, recordPublishedFence } from "../../lib/rebuilds/published-fence";

const root = fs.mkdtempSync(path.join(os.tmpdir(), "cw-build-"));
after(() => {
  fs.chmodSync(root, 0o755);
  fs.rmSync(root, { recursive: true, force: true });
});

function workDir(files: Record<string, string>): string {
  const dir = fs.mkdtempSync(path.join(root, "work-"));
  for (const [name, content] of Object.entries(files)) {
    fs.mkdirSync(path.dirname(path.join(dir, name)), { recursive: true });
    fs.writeFileSync(path.join(dir, name), content);
  }
  return dir;
}

test("a promoted build is read-only, keeps its execute bits and shares no inode with the outside", async () => {
  const output = fs.mkdtempSync(path.join(root, "out-"));
  const dir = workDir({ "run.sh": "#!/bin/sh\necho hi\n", "data/a.txt": "a\n" });
  fs.chmodSync(path.join(dir, "run.sh"), 0o755);
  const outside = path.join(root, "outside.txt");
  fs.writeFileSync(outside, "shared\n");
  fs.linkSync(outside, path.join(dir, "data", "linked.txt"));
  const hash = await hashDirectory(dir);
  const { path: build } = await promoteBuild(output, dir, hash);
  assert.equal(fs.statSync(path.join(build, "run.sh")).mode & 0o777, 0o555);
  assert.equal(fs.statSync(path.join(build, "data", "a.txt")).mode & 0o777, 0o444);
  assert.equal(fs.statSync(path.join(build, "data")).mode & 0o222, 0);
  assert.equal(fs.statSync(build).mode & 0o222, 0);
  assert.equal(fs.statSync(path.join(build, "data", "linked.txt")).nlink, 1, "the hard link was broken");
  assert.equal(fs.statSync(outside).mode & 0o200, 0o200, "the outside file was not sealed");
  assert.equal(await hashDirectory(build), hash);
  // Pruning a sealed build works (as root here; removeTree restores directory write bits otherwise).
  fs.writeFileSync(path.join(output, "keep"), "");
  assert.deepEqual(await pruneBuilds(output, 0), [hash]);
  assert.equal(fs.existsSync(build), false);
});

test("a symlink out of the build, or a FIFO, is refused; a symlink inside counts in the hash", async () => {
  const out = workDir({ "a.txt": "a\n" });
  fs.symlinkSync("/etc/hostname", path.join(out, "host"));
  await assert.rejects(hashDirectory(out), BuildContentError);
  const up = workDir({ "a.txt": "a\n" });
  fs.symlinkSync("../../x", path.join(up, "up"));
  await assert.rejects(hashDirectory(up), /symlink out of the build/);
  const fifo = workDir({});
  const { spawnSync } = await import("node:child_process");
  spawnSync("mkfifo", [path.join(fifo, "pipe")]);
  await assert.rejects(hashDirectory(fifo), /not a file, directory or symlink/);

  const plain = workDir({ "a.txt": "a\n", "b/c.txt": "c\n" });
  const before = await hashDirectory(plain);
  fs.symlinkSync("../a.txt", path.join(plain, "b", "link"));
  const withLink = await hashDirectory(plain);
  assert.notEqual(withLink, before);
  fs.unlinkSync(path.join(plain, "b", "link"));
  fs.symlinkSync("c.txt", path.join(plain, "b", "link"));
  assert.notEqual(await hashDirectory(plain), withLink, "the target is part of the hash");
});

test("reusing a hash: the same bytes drop the new copy; changed bytes are moved aside and replaced", async () => {
  const output = fs.mkdtempSync(path.join(root, "out-"));
  const first = workDir({ "a.txt": "same\n" });
  const hash = await hashDirectory(first);
  await promoteBuild(output, first, hash);
  const repeat = workDir({ "a.txt": "same\n" });
  const again = await promoteBuild(output, repeat, hash);
  assert.equal(again.changedMovedTo, null);
  assert.equal(fs.existsSync(repeat), false);

  fs.writeFileSync(path.join(output, "builds", hash, "a.txt"), "SAME\n"); // as root
  assert.deepEqual(
    (await verifyBuilds(output)).changed.map((c) => c.path),
    [path.join(output, "builds", hash)],
  );
  const fresh = workDir({ "a.txt": "same\n" });
  const replaced = await promoteBuild(output, fresh, hash);
  assert.ok(replaced.changedMovedTo && fs.existsSync(replaced.changedMovedTo));
  assert.equal(await hashDirectory(path.join(output, "builds", hash)), hash);
  assert.deepEqual((await verifyBuilds(output)).changed, []);
});

test("a killed writer's temporary files beside the output are removed once old; the record, current and fresh ones stay", async () => {
  const output = fs.mkdtempSync(path.join(root, "out-"));
  const build = workDir({ "a.txt": "kept\n" });
  const hash = await hashDirectory(build);
  await promoteBuild(output, build, hash);
  assert.deepEqual(await recordPublishedFence(output, 3, hash), { status: "recorded" });
  fs.symlinkSync(path.join("builds", hash), path.join(output, "current"));
  // What a writer killed before its link or rename leaves: named as the writers name them.
  const oldFence = outputTempName(output, ".published-fence-writing.");
  fs.writeFileSync(oldFence, hash);
  const oldCurrent = outputTempName(output, ".current-");
  fs.symlinkSync(path.join("builds", "gone"), oldCurrent); // dangling: its target's age cannot count
  const freshFence = outputTempName(output, ".published-fence-writing.");
  fs.writeFileSync(freshFence, hash);
  const hourAgo = new Date(Date.now() - 3_600_000);
  for (const name of fs.readdirSync(output)) {
    const file = path.join(output, name);
    if (file !== freshFence) fs.lutimesSync(file, hourAgo, hourAgo); // the record and current too
  }

  const removed = await pruneLeftTemps(output, 60_000);
  assert.deepEqual(removed.sort(), [path.basename(oldCurrent), path.basename(oldFence)].sort());
  assert.equal(fs.existsSync(freshFence), true, "a temporary younger than the age may be a live writer's");
  assert.equal(fs.readlinkSync(path.join(output, "current")), path.join("builds", hash));
  assert.deepEqual(await readPublishedFence(output), { fence: 3, hash });
  assert.deepEqual(await recordPublishedFence(output, 4, hash), { status: "recorded" });
  assert.equal((await readPublishedFence(output))?.fence, 4);
});

test("makeDirectory: parents made, one answer for many callers at once, EEXIST for a file or a dangling link in the way", async () => {
  const base = fs.mkdtempSync(path.join(root, "mkdir-"));
  const deep = path.join(base, "a", "b", "c");
  const created = await Promise.all(Array.from({ length: 8 }, () => makeDirectory(deep)));
  assert.equal(fs.statSync(deep).isDirectory(), true);
  assert.ok(created.includes(true), "one of them made it");
  assert.equal(await makeDirectory(deep), false, "there already");
  fs.writeFileSync(path.join(base, "file"), "");
  await assert.rejects(makeDirectory(path.join(base, "file")), { code: "EEXIST" });
  fs.symlinkSync(path.join(base, "nowhere"), path.join(base, "dangling"));
  await assert.rejects(makeDirectory(path.join(base, "dangling")), { code: "EEXIST" });
  fs.symlinkSync(deep, path.join(base, "to-dir"));
  assert.equal(await makeDirectory(path.join(base, "to-dir")), false, "a link to a directory is one");
  await assert.rejects(makeDirectory(path.join(base, "file", "below")), { code: "ENOTDIR" });
});
