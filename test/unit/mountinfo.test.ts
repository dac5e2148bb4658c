/** The builds namespace's reading of mount tables (builds-namespace.ts). */
import assert from "node:assert/strict";
import { test } from "node:test";
import { mountsOf } from "../../lib/rebuilds/steps/builds-namespace";

const line = (id: number, point: string, options: string, tags = "shared:1") =>
  `${id} 1 8:1 /x ${point} ${options} ${tags} - ext4 /dev/sda1 rw`;

test("mounts: points unescaped as the kernel wrote them, read-only read from the options, in table order", () => {
  const mounts = mountsOf(
    [
      line(20, "/", "rw,relatime"),
      line(30, "/out/builds", "ro,relatime"),
      line(31, "/out/b\\040c/builds", "ro,relatime"),
      line(33, "/other/builds", "rw,relatime", ""),
      "not a mount line",
    ].join("\n"),
  );
  assert.deepEqual(
    mounts.map((m) => [m.point, m.readOnly]),
    [
      ["/", false],
      ["/out/builds", true],
      ["/out/b c/builds", true],
      ["/other/builds", false],
    ],
  );
});

test("a mount's key is the same in a copy of the namespace: ids and peer groups aside", () => {
  const [worker] = mountsOf(line(20, "/srv", "rw,relatime", "shared:1"));
  const [copy] = mountsOf(`412 399 8:1 /x /srv rw,relatime master:1 - ext4 /dev/sda1 rw`);
  assert.equal(worker!.key, copy!.key);
  const [readOnly] = mountsOf(line(20, "/srv", "ro,relatime"));
  assert.notEqual(worker!.key, readOnly!.key);
});

test("a bind of a mount namespace's file is told apart (a new namespace never gets a copy of it)", () => {
  const [snap, proc] = mountsOf(
    [
      "600 25 0:4 mnt:[4026532281] /run/snapd/ns/lxd.mnt rw - nsfs nsfs rw",
      "601 25 0:4 net:[4026532282] /run/netns/a rw - nsfs nsfs rw",
    ].join("\n"),
  );
  assert.equal(snap!.namespaceFile, true);
  assert.equal(proc!.namespaceFile, false, "a network namespace's file is copied like any mount");
});
