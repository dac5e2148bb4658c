/** The version a worker reports names its checkout's commit (lib/version.ts), from every form of `.git` it may find. */
import assert from "node:assert/strict";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, test } from "node:test";
import { checkoutCommit } from "../../lib/version";

const root = fs.mkdtempSync(path.join(os.tmpdir(), "claimwatch-version-"));
after(() => fs.rmSync(root, { recursive: true, force: true }));
const A = "a9d499f0123456789abcdef0123456789abcdef0";
const B = "b1c2d3e0123456789abcdef0123456789abcdef0";

test("the commit of a branch ref, a packed ref and a detached HEAD; none without a checkout", () => {
  const git = path.join(root, ".git");
  assert.equal(checkoutCommit(root), null, "no .git");
  fs.mkdirSync(path.join(git, "refs", "heads"), { recursive: true });
  fs.writeFileSync(path.join(git, "HEAD"), "ref: refs/heads/main\n");
  fs.writeFileSync(
    path.join(git, "packed-refs"),
    `# pack-refs with: peeled fully-peeled sorted\n${B} refs/heads/main\n`,
  );
  assert.equal(checkoutCommit(root), "b1c2d3e", "packed");
  fs.writeFileSync(path.join(git, "refs", "heads", "main"), `${A}\n`);
  assert.equal(checkoutCommit(root), "a9d499f", "the loose ref wins");
  fs.writeFileSync(path.join(git, "HEAD"), `${B}\n`);
  assert.equal(checkoutCommit(root), "b1c2d3e", "detached");
  fs.writeFileSync(path.join(git, "HEAD"), "garbage\n");
  assert.equal(checkoutCommit(root), null);
});
