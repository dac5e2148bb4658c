/** Input hashes are served from the cache only while the files are unchanged and settled. */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import fsp from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { after, test } from "node:test";
import { StepFailedError } from "../../lib/rebuilds/steps/context";
import { abandonedInputReads, hashInputs, InputHashCache } from "../../lib/rebuilds/version";

const dir = fs.mkdtempSync(path.join(os.tmpdir(), "claimwatch-inputs-"));
after(() => fs.rmSync(dir, { recursive: true, force: true }));

const write = (name: string, text: string) => {
  const file = path.join(dir, name);
  fs.writeFileSync(file, text);
  return file;
};
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

test("settled, unchanged inputs are hashed once; a change of content (same size) is seen", async () => {
  const files = [write("a.geojson", "aaaa"), write("b.csv", "bbbb")];
  const cache = new InputHashCache(256, 200);
  await sleep(300); // past the settle window
  const first = await hashInputs(files, { cache });
  assert.equal(await hashInputs(files, { cache }), first);
  assert.deepEqual([cache.misses, cache.hits], [1, 1]);

  fs.writeFileSync(files[1]!, "cccc"); // same size, new content
  const changed = await hashInputs(files, { cache });
  assert.notEqual(changed, first);
  assert.equal(cache.misses, 2);
  assert.equal(changed, await hashInputs(files, { cache: new InputHashCache() }), "the same hash as a fresh read");
});

test("files changed within the settle window are read again every time", async () => {
  const files = [write("fresh.txt", "x")];
  const cache = new InputHashCache(256, 60_000);
  const first = await hashInputs(files, { cache });
  assert.equal(await hashInputs(files, { cache }), first);
  assert.deepEqual([cache.misses, cache.hits], [2, 0]);
});

test("the order and the names of the inputs are part of the hash; a missing input names itself", async () => {
  const a = write("one.txt", "same");
  const b = write("two.txt", "same");
  const cache = new InputHashCache(256, 0);
  assert.notEqual(await hashInputs([a, b], { cache }), await hashInputs([b, a], { cache }));
  await assert.rejects(
    hashInputs([a, path.join(dir, "missing.txt")], { cache }),
    (error: unknown) => error instanceof StepFailedError && /missing\.txt cannot be read: ENOENT/.test(error.message),
  );
});

test("the cache is bounded: the oldest entry makes room", async () => {
  const cache = new InputHashCache(2, 0);
  const files = ["p", "q", "r"].map((name) => write(`${name}.txt`, name));
  await sleep(5);
  for (const file of files) await hashInputs([file], { cache });
  await hashInputs([files[0]!], { cache }); // evicted: read again
  await hashInputs([files[2]!], { cache }); // kept
  assert.deepEqual([cache.misses, cache.hits], [4, 1]);
});

const fifos: string[] = [];
/** A FIFO: opening it for reading blocks until a writer opens it (a read stuck in the kernel). */
function fifo(name: string): string {
  const file = path.join(dir, name);
  assert.equal(spawnSync("mkfifo", [file]).status, 0, "mkfifo");
  fifos.push(file);
  return file;
}
// A reader a failed test left waiting at a FIFO would hold this process's exit: let it through.
after(() => {
  for (const file of fifos) {
    try {
      fs.closeSync(fs.openSync(file, fs.constants.O_WRONLY | fs.constants.O_NONBLOCK));
    } catch {
      // no reader waiting
    }
  }
});

/**
 * Lets every reader blocked opening `file` through, then gives them end of file. Waits up to 1 s
 * for a reader to arrive; says whether one came (a read served from the cache never does).
 */
async function release(file: string): Promise<boolean> {
  const deadline = Date.now() + 1_000;
  // A reader that got its end of file may not have closed yet: this writer would then open
  // against it, and the reader still on its way would wait for a writer for good.
  while (fdsOpenOn(file) > 0) {
    if (Date.now() > deadline) return false;
    await sleep(10);
  }
  for (;;) {
    try {
      // Non-blocking: fails with ENXIO while no reader has the FIFO open.
      const writer = await fsp.open(file, fs.constants.O_WRONLY | fs.constants.O_NONBLOCK);
      await writer.close();
      return true;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "ENXIO" || Date.now() > deadline) return false;
      await sleep(20);
    }
  }
}

/** File descriptors of this process open on `file`. */
function fdsOpenOn(file: string): number {
  let count = 0;
  for (const fd of fs.readdirSync("/proc/self/fd")) {
    try {
      if (fs.readlinkSync(`/proc/self/fd/${fd}`) === file) count += 1;
    } catch {
      // closed meanwhile
    }
  }
  return count;
}

async function until(what: string, check: () => boolean): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(20);
  }
}

test("a read its callers stopped waiting for is counted once until it ends; callers of a cache share one read", async () => {
  const stuck = fifo("stuck.fifo");
  const before = abandonedInputReads();
  const alone = new AbortController();
  const reading = hashInputs([stuck], { signal: alone.signal });
  alone.abort("cancelled");
  await assert.rejects(reading, /reading the inputs stopped: cancelled/);
  assert.equal(abandonedInputReads(), before + 1);

  const cache = new InputHashCache(256, 0);
  const callers = [new AbortController(), new AbortController(), new AbortController()];
  const shared = callers.map((caller) => hashInputs([stuck], { cache, signal: caller.signal }));
  for (const caller of callers) caller.abort("timeout");
  for (const call of shared) await assert.rejects(call, /reading the inputs stopped: timeout/);
  assert.equal(abandonedInputReads(), before + 2, "the three callers of the cache left one read behind");

  assert.ok(await release(stuck), "the cache's read was waiting at the FIFO");
  await until("the stuck reads ended", () => abandonedInputReads() === before);
});

test("a read shared by callers files its hash under the inputs as they were when it began", async () => {
  const text = write("shared.txt", "old");
  const stuck = fifo("shared.fifo");
  const cache = new InputHashCache(256, 100);
  await sleep(150); // settled
  const first = hashInputs([text, stuck], { cache }); // reads "old", then waits at the FIFO
  await sleep(100);
  fs.writeFileSync(text, "NEW");
  await sleep(150); // the new content settled too
  const second = hashInputs([text, stuck], { cache }); // asks while the first read still waits
  await sleep(100);
  assert.ok(await release(stuck));
  await Promise.all([first, second]);
  // The next look at the new content must read it, not be served the old content's hash.
  const next = hashInputs([text, stuck], { cache });
  assert.ok(await release(stuck), "the new content is read (not served from the cache)");
  const fresh = hashInputs([text, stuck]);
  assert.ok(await release(stuck));
  assert.equal(await next, await fresh);
});
