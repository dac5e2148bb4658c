/** The builds namespace's check of its mount table (builds-namespace.ts): the topmost mount counts. */
import assert from "node:assert/strict";
import { test } from "node:test";
import { topmostMountIsReadOnly } from "../../lib/rebuilds/steps/builds-namespace";

const line = (id: number, point: string, options: string) =>
  `${id} 1 8:1 /x ${point} ${options} shared:1 - ext4 /dev/sda1 rw`;

test("the topmost mount at a path decides; escaped paths are read as the kernel wrote them", () => {
  const table = [
    line(20, "/", "rw,relatime"),
    line(30, "/out/builds", "ro,relatime"),
    line(31, "/out/b\\040c/builds", "ro,relatime"),
    line(32, "/other/builds", "ro,relatime"),
    line(33, "/other/builds", "rw,relatime"),
  ].join("\n");
  assert.equal(topmostMountIsReadOnly(table, "/out/builds"), true);
  assert.equal(topmostMountIsReadOnly(table, "/out/b c/builds"), true);
  assert.equal(topmostMountIsReadOnly(table, "/other/builds"), false, "a writable mount over the read-only one");
  assert.equal(topmostMountIsReadOnly(table, "/none/builds"), false, "no mount there");
  assert.equal(topmostMountIsReadOnly(table, "/out"), false, "a parent is no mount of its own");
});
