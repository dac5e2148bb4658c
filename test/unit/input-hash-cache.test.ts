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
const fifos: string[] = [];
after(() => {
  // First let through any reader a failed test left waiting at a FIFO (it would hold this
  // process's exit), then remove the files: a FIFO removed first can no longer be opened.
  for (const file of fifos) {
    try {
      fs.closeSync(fs.openSync(file, fs.constants.O_WRONLY | fs.constants.O_NONBLOCK));
    } catch {
      // no reader waiting
    }
  }
  fs.rmSync(dir, { recursive: true, force: true });
});

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

/** A FIFO: opening it for reading blocks until a writer opens it (a read stuck in the kernel). */
function fifo(name: string): string {
  const file = path.join(dir, name);
  assert.equal(spawnSync("mkfifo", [file]).status, 0, "mkfifo");
  fifos.push(file);
  return file;
}

/** Threads of this process waiting in open() of a FIFO for a writer (Linux: wchan `wait_for_partner`). */
function waitingAtFifos(): number {
  let count = 0;
  for (const task of fs.readdirSync("/proc/self/task")) {
    try {
      if (fs.readFileSync(`/proc/self/task/${task}/wchan`, "utf8") === "wait_for_partner") count += 1;
    } catch {
      // the thread ended meanwhile
    }
  }
  return count;
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

/**
 * Once `readers` threads wait at FIFOs (and no reader still holds `file` open from before), lets
 * them all through and gives them end of file.
 */
async function release(file: string, readers = 1): Promise<void> {
  await until(`${readers} reader(s) waiting at a FIFO`, () => waitingAtFifos() >= readers && fdsOpenOn(file) === 0);
  const writer = await fsp.open(file, fs.constants.O_WRONLY | fs.constants.O_NONBLOCK);
  await writer.close();
}

test("a read its callers stopped waiting for is counted once until it ends; callers of a cache share one read", async () => {
  const stuck = fifo("stuck.fifo");
  const before = abandonedInputReads();
  const alone = new AbortController();
  const reading = hashInputs([stuck], { signal: alone.signal });
  await until("the read waiting at the FIFO", () => waitingAtFifos() === 1);
  alone.abort("cancelled");
  await assert.rejects(reading, /reading the inputs stopped: cancelled/);
  await sleep(200);
  assert.equal(abandonedInputReads(), before + 1, "still stuck, still counted");

  const cache = new InputHashCache(256, 0);
  const callers = [new AbortController(), new AbortController(), new AbortController()];
  const shared = callers.map((caller) => hashInputs([stuck], { cache, signal: caller.signal }));
  await until("the cache's one read waiting too", () => waitingAtFifos() === 2);
  for (const caller of callers) caller.abort("timeout");
  for (const call of shared) await assert.rejects(call, /reading the inputs stopped: timeout/);
  assert.equal(abandonedInputReads(), before + 2, "the three callers of the cache left one read behind");
  await assert.rejects(
    hashInputs([write("any.txt", "x")], { signal: new AbortController().signal }),
    /2 earlier reads of inputs are still stuck in the kernel/,
    "no new read while two are stuck",
  );

  const waiting = waitingAtFifos();
  await release(stuck, waiting);
  await until("the stuck reads ended", () => abandonedInputReads() === before);
  await until("their files closed", () => fdsOpenOn(stuck) === 0);
});

test("a read stopped during its stat opens nothing; a cache looks at one input at a time", async () => {
  const file = write("plain.txt", "plain");
  const realStat = fsp.stat;
  let statsInFlight = 0;
  let mostInFlight = 0;
  const held: (() => void)[] = [];
  // A stat that answers only when let go: as on a slow or hung mount.
  fsp.stat = ((...args: Parameters<typeof realStat>) => {
    statsInFlight += 1;
    mostInFlight = Math.max(mostInFlight, statsInFlight);
    return new Promise((resolve, reject) =>
      held.push(() => {
        statsInFlight -= 1;
        realStat(...args).then(resolve, reject);
      }),
    );
  }) as typeof realStat;
  try {
    const stop = new AbortController();
    const reading = hashInputs([file], { signal: stop.signal });
    await until("the stat asked", () => held.length === 1);
    stop.abort("cancelled");
    await assert.rejects(reading, /reading the inputs stopped: cancelled/);
    held.shift()!();
    await until("the stopped read ended", () => abandonedInputReads() === 0);
    await sleep(100);
    assert.equal(fdsOpenOn(file), 0, "no file opened (and left open) after the stop");

    const inputs = ["p1", "p2", "p3", "p4"].map((name) => write(`${name}.txt`, name));
    const looking = hashInputs(inputs, { cache: new InputHashCache(256, 0) });
    for (let answered = 0; answered < inputs.length; answered++) {
      await until("the next stat", () => held.length === 1);
      held.shift()!();
    }
    fsp.stat = realStat; // the read's own stats
    assert.match(await looking, /^in-[0-9a-f]{16}$/);
    assert.equal(mostInFlight, 1, "one stat at a time");
  } finally {
    fsp.stat = realStat;
    for (const let_go of held.splice(0)) let_go();
  }
});

test("a read shared by callers files its hash under the inputs as they were when it began", async () => {
  const text = write("shared.txt", "old");
  const stuck = fifo("shared.fifo");
  const cache = new InputHashCache(256, 100);
  await sleep(150); // settled
  const first = hashInputs([text, stuck], { cache }); // reads "old", then waits at the FIFO
  await until("the first read waiting at the FIFO", () => waitingAtFifos() === 1);
  fs.writeFileSync(text, "NEW");
  await sleep(150); // the new content settled too
  const second = hashInputs([text, stuck], { cache }); // asks while the first read still waits
  await sleep(50);
  await release(stuck);
  await Promise.all([first, second]);
  // The next look at the new content must read it, not be served the old content's hash.
  const next = hashInputs([text, stuck], { cache });
  await release(stuck);
  const fresh = hashInputs([text, stuck]);
  await release(stuck);
  assert.equal(await next, await fresh);
});
