/**
 * What a published run's record says of `current` when the swap after its publish failed
 * (lib/rebuilds/build-and-publish.ts currentNoteOf), from the stage that failed (reviews 125, 127:
 * read back afterwards, `current` could not tell a failed swap from a failed sync, nor this build
 * from a newer publish's).
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { currentNoteOf } from "../../lib/rebuilds/build-and-publish";
import { CurrentSwapError } from "../../lib/rebuilds/output";

const own = "a".repeat(32);
const newer = "b".repeat(32);
const eio = Object.assign(new Error("EIO: i/o error, symlink"), { code: "EIO" });

test("the swap of its own build failed: current still serves the build before", () => {
  const note = currentNoteOf("/srv/out/current", own, new CurrentSwapError("swap", own, eio));
  assert.match(
    note,
    /^\/srv\/out\/current could not be moved to its build when it ended \(EIO: i\/o error, symlink\): the output served the build before/,
  );
});

test("the sync after the swap failed: current names its build, not yet durably", () => {
  const note = currentNoteOf("/srv/out/current", own, new CurrentSwapError("sync", own, eio));
  assert.match(note, /^\/srv\/out\/current was moved to its build, but the move could not be synced to disk/);
});

test("following a newer publish failed: its own build was served; the newer one is repair's", () => {
  const note = currentNoteOf("/srv/out/current", own, new CurrentSwapError("swap", newer, eio));
  assert.match(note, new RegExp(`was moved to its build; following a newer publish's build ${newer} then failed`));
});

test("the check for a newer publish failed: said as such", () => {
  const note = currentNoteOf("/srv/out/current", own, eio);
  assert.match(note, /was moved to its build, but the check for a newer publish after it failed \(EIO/);
});

test("the error keeps its cause's message and errno code", () => {
  const error = new CurrentSwapError("sync", own, eio);
  assert.equal(error.message, eio.message);
  assert.equal(error.code, "EIO");
  assert.equal(error.cause, eio);
});
