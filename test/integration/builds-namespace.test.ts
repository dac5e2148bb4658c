/**
 * The worker's namespace for read-only builds (builds-namespace.ts) under concurrent steps and
 * retirements, as root: binds in flight do not retire the namespace, and a retired namespace's
 * descriptor is closed exactly once (a second close would close whatever reused the number).
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, mock, test } from "node:test";
import { BuildsNamespace } from "../../lib/rebuilds/steps/builds-namespace";

const root = process.getuid?.() === 0;

const dirs: string[] = [];
after(() => {
  for (const dir of dirs) fs.rmSync(dir, { recursive: true, force: true });
});

function outputs(n: number): string[] {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "cw-builds-ns-"));
  dirs.push(dir);
  return Array.from({ length: n }, (_, i) => {
    const builds = path.join(dir, `out-${i}`, "builds");
    fs.mkdirSync(builds, { recursive: true });
    return builds;
  });
}

test(
  "steps of many outputs entering at once: their binds are made one at a time and retire nothing",
  { skip: !root },
  async () => {
    const namespace = new BuildsNamespace();
    const dirs = outputs(6);
    const entries = await Promise.all([...dirs, ...dirs, ...dirs].map((dir) => namespace.enter(dir, "/")));
    assert.deepEqual(new Set(entries.map((e) => e.generation)).size, 1, "one namespace for all");
    assert.ok(entries.every((e) => namespace.isCurrent(e)));
    const table = fs.readFileSync(`/proc/${namespace.holderPid}/mountinfo`, "utf8");
    for (const dir of dirs) assert.ok(table.includes(` ${dir} ro,`), `${dir} bound read-only`);
    assert.ok(!fs.readFileSync("/proc/self/mountinfo", "utf8").includes(dirs[0]!), "no bind in the worker's view");
  },
);

test(
  "a retired namespace's descriptor is closed once, and only when no step it was handed to is still out (its number could name a newer namespace)",
  { skip: !root },
  async (t) => {
    const closes = new Map<number, number>();
    const close = fs.close;
    mock.method(fs, "close", (fd: number, callback: (error: NodeJS.ErrnoException | null) => void) => {
      closes.set(fd, (closes.get(fd) ?? 0) + 1);
      return close(fd, callback);
    });
    t.after(() => mock.restoreAll());
    const namespace = new BuildsNamespace();
    const [dir] = outputs(1);
    const fdOf = (entry: { prefix: string[] }) => Number(/fd\/(\d+)$/.exec(entry.prefix[1]!)![1]);
    const first = await namespace.enter(dir!, "/");
    const late = await namespace.enter(dir!, "/"); // a step whose nsenter has not opened it yet
    first.release();
    namespace.retireEntry(late, "test"); // SIGKILL: its exit comes too, and must not close it again
    await new Promise((r) => setTimeout(r, 200));
    assert.equal(closes.get(fdOf(late)) ?? 0, 0, "kept open while a step may still enter it");
    const second = await namespace.enter(dir!, "/");
    assert.notEqual(fdOf(second), fdOf(late), "a newer namespace never gets the number of one still handed out");
    late.release();
    late.release(); // a second release changes nothing
    await new Promise((r) => setTimeout(r, 100));
    assert.equal(closes.get(fdOf(late)), 1, "closed once, when released");
    assert.equal(closes.get(fdOf(second)) ?? 0, 0, "the live one is not closed");
    assert.equal(fs.fstatSync(fdOf(second)).ino, fs.statSync(`/proc/${namespace.holderPid}/ns/mnt`).ino);
    assert.ok(namespace.isCurrent(second));
    second.release();
  },
);
