/**
 * Issue 14, defect 5: one output, one claim. Workers that reach one directory through different
 * paths (a symlinked release directory, a mount seen at another point) must name one claim; an
 * output whose identity cannot be pinned (a symlink loop, a file in the way) is refused when the
 * definitions load. Real directories and symlinks.
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, test } from "node:test";
import { claimName } from "../../lib/claims";
import { loadDefinitions } from "../../lib/rebuilds/definitions";

const root = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), "claimwatch-realpath-")));
after(() => fs.rmSync(root, { recursive: true, force: true }));

function load(dir: string, output: string) {
  fs.mkdirSync(dir, { recursive: true });
  const file = path.join(dir, "claimwatch.yaml");
  fs.writeFileSync(
    file,
    `rebuilds:\n  tiles:\n    output: ${JSON.stringify(output)}\n    tenants: [acme]\n    steps: [{ name: s, run: ["true"] }]\n`,
  );
  return loadDefinitions(file);
}

test("an output reached through a symlink names the same claim as its real path (existing or not yet)", () => {
  fs.mkdirSync(path.join(root, "data", "tiles"), { recursive: true });
  fs.symlinkSync(path.join(root, "data"), path.join(root, "release"));
  const direct = load(path.join(root, "a"), path.join(root, "data", "tiles"));
  const viaLink = load(path.join(root, "b"), path.join(root, "release", "tiles"));
  assert.ok(direct.ok && viaLink.ok);
  const one = direct.definitions.rebuilds.get("tiles")!;
  const other = viaLink.definitions.rebuilds.get("tiles")!;
  assert.notEqual(one.outputPath, other.outputPath, "the paths differ as written");
  assert.equal(claimName(other.claimPath, "acme"), claimName(one.claimPath, "acme"));
  assert.equal(claimName(other.claimPath), `output:${path.join(root, "data", "tiles")}`);

  // Not created yet: pinned by its nearest existing ancestor.
  const later = load(path.join(root, "c"), path.join(root, "release", "fresh", "tiles"));
  assert.ok(later.ok);
  assert.equal(
    claimName(later.definitions.rebuilds.get("tiles")!.claimPath),
    `output:${path.join(root, "data", "fresh", "tiles")}`,
  );
});

test("two rebuilds sharing one output through a symlink are refused", () => {
  const dir = path.join(root, "shared");
  fs.mkdirSync(path.join(dir, "real"), { recursive: true });
  fs.symlinkSync(path.join(dir, "real"), path.join(dir, "alias"));
  const file = path.join(dir, "claimwatch.yaml");
  fs.writeFileSync(
    file,
    'rebuilds:\n  one:\n    output: real\n    steps: [{ name: s, run: ["true"] }]\n  two:\n    output: alias\n    steps: [{ name: s, run: ["true"] }]\n',
  );
  const loaded = loadDefinitions(file);
  assert.equal(loaded.ok, false);
  assert.match(String(!loaded.ok && loaded.error.message), /also the output of rebuild 'one'/);
});

test("an output whose identity cannot be pinned is refused with one line naming it", () => {
  const dir = path.join(root, "bad");
  fs.mkdirSync(dir, { recursive: true });
  fs.symlinkSync("loop", path.join(dir, "loop"));
  const looped = load(path.join(dir, "l"), path.join(dir, "loop", "tiles"));
  assert.equal(looped.ok, false);
  assert.match(String(!looped.ok && looped.error.message), /rebuilds\.tiles\.output.*cannot be pinned.*ELOOP/);
  fs.writeFileSync(path.join(dir, "file"), "");
  const blocked = load(path.join(dir, "f"), path.join(dir, "file", "tiles"));
  assert.equal(blocked.ok, false);
  assert.match(String(!blocked.ok && blocked.error.message), /cannot be pinned.*ENOTDIR/);
});
