/** Input hashes are served from the cache only while the files are unchanged and settled. */
import assert from "node:assert/strict";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, test } from "node:test";
import { StepFailedError } from "../../lib/rebuilds/steps/context";
import { hashInputs, InputHashCache } from "../../lib/rebuilds/version";

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
