/**
 * lib/launcher/bundle.mjs, on a small project in a temp dir: a bundle behaves as its modules did
 * (each module's own import.meta.url, the words in a string untouched, class names kept), it is
 * reused while its sources are unchanged and rebuilt when one changes, a build whose sources
 * changed while it ran is not taken for current, a copied tree builds its own, a cache it cannot
 * write means tsx (null), and no esbuild process outlives a build.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, test } from "node:test";
import { pathToFileURL } from "node:url";
import { bundled } from "../../lib/launcher/bundle.mjs";
import { descendantPids } from "../support/processes";
import { until } from "../support/until";

const scratch = fs.mkdtempSync(path.join(os.tmpdir(), "cw-bundle-"));
after(() => fs.rmSync(scratch, { recursive: true, force: true }));

const HOUR_AGO = new Date(Date.now() - 3_600_000);
/** This test process's own children (tsx's compiler among them), before any build. */
const childrenBefore = descendantPids(process.pid);
const esbuildLeft = () => descendantPids(process.pid).filter((pid) => !childrenBefore.includes(pid));

/** A project: main.ts imports where.ts, which says its own URL, a string and a class name. */
function project(root: string, greeting = "hello"): void {
  fs.mkdirSync(path.join(root, "src"), { recursive: true });
  fs.writeFileSync(path.join(root, "tsconfig.json"), JSON.stringify({ compilerOptions: { target: "ES2023" } }));
  fs.writeFileSync(
    path.join(root, "src", "where.ts"),
    [
      "// a comment naming import.meta.url stays a comment",
      "export const here: string = import.meta.url;",
      'export const words: string = "import.meta.url";',
      "export class Named {}",
    ].join("\n"),
  );
  fs.writeFileSync(
    path.join(root, "src", "main.ts"),
    [
      'import { here, words, Named } from "./where.ts";',
      `console.log(JSON.stringify({ here, words, name: Named.name, greeting: ${JSON.stringify(greeting)}, main: import.meta.url }));`,
    ].join("\n"),
  );
  for (const file of ["tsconfig.json", "src/where.ts", "src/main.ts"])
    fs.utimesSync(path.join(root, file), HOUR_AGO, HOUR_AGO);
}

function run(file: string): Record<string, string> {
  const result = spawnSync(process.execPath, [file], { encoding: "utf8" });
  assert.equal(result.status, 0, result.stderr);
  return JSON.parse(result.stdout) as Record<string, string>;
}

test("a bundle behaves as its modules: own import.meta.url, strings untouched, names kept", async () => {
  const root = path.join(scratch, "a");
  project(root);
  const lines: string[] = [];
  const file = await bundled("src/main.ts", (line) => lines.push(line), { root, cache: path.join(root, "cache") });
  assert.ok(file, lines.join("\n"));
  assert.match(lines.join("\n"), /bundle src\/main\.ts: built in \d+ ms/);
  const said = run(file);
  assert.equal(said.here, pathToFileURL(path.join(root, "src", "where.ts")).href);
  assert.equal(said.main, pathToFileURL(path.join(root, "src", "main.ts")).href);
  assert.equal(said.words, "import.meta.url");
  assert.equal(said.name, "Named");
  await until("no esbuild service left running", async () => esbuildLeft().length === 0, 10_000);
});

test("reused while the sources are unchanged; a changed source builds a new bundle", async () => {
  const root = path.join(scratch, "b");
  const cache = path.join(root, "cache");
  project(root);
  const first = await bundled("src/main.ts", undefined, { root, cache });
  const lines: string[] = [];
  assert.equal(await bundled("src/main.ts", (line) => lines.push(line), { root, cache }), first);
  assert.deepEqual(lines, [], "no build");

  project(root, "changed");
  const second = await bundled("src/main.ts", undefined, { root, cache });
  assert.ok(second && second !== first, "a new bundle, by its content");
  assert.equal(run(second).greeting, "changed");
  assert.equal(run(first!).greeting, "hello", "the old bundle was not rewritten");
});

test("a build whose source changed while it ran is used once, not stamped: the next start builds again", async () => {
  const root = path.join(scratch, "c");
  const cache = path.join(root, "cache");
  project(root);
  fs.utimesSync(path.join(root, "src", "where.ts"), new Date(), new Date()); // saved just now
  const lines: string[] = [];
  assert.ok(await bundled("src/main.ts", (line) => lines.push(line), { root, cache }));
  assert.ok(await bundled("src/main.ts", (line) => lines.push(line), { root, cache }));
  assert.equal(lines.filter((line) => line.includes("built in")).length, 2, lines.join("\n"));
});

test("a copy of the tree (same mtimes) sharing the cache builds its own bundle, with its own URLs", async () => {
  const root = path.join(scratch, "d");
  const cache = path.join(scratch, "shared-cache");
  project(root);
  const original = await bundled("src/main.ts", undefined, { root, cache });
  const copy = path.join(scratch, "d-copy");
  fs.cpSync(root, copy, { recursive: true, preserveTimestamps: true });
  const copied = await bundled("src/main.ts", undefined, { root: copy, cache });
  assert.ok(copied && copied !== original);
  assert.equal(run(copied).here, pathToFileURL(path.join(copy, "src", "where.ts")).href);
});

test("a cache that cannot be made: null (the caller runs tsx), saying why", async () => {
  const root = path.join(scratch, "e");
  project(root);
  fs.writeFileSync(path.join(root, "not-a-dir"), "");
  const lines: string[] = [];
  const file = await bundled("src/main.ts", (line) => lines.push(line), {
    root,
    cache: path.join(root, "not-a-dir", "cache"),
  });
  assert.equal(file, null);
  assert.match(
    lines.join("\n"),
    /bundle src\/main\.ts: cannot write .*not-a-dir\/cache \(ENOTDIR\); running it through tsx/,
  );
});

test("a source that does not compile: null (the caller runs tsx), saying why", async () => {
  const root = path.join(scratch, "f");
  project(root);
  fs.writeFileSync(path.join(root, "src", "main.ts"), "export const = ;");
  const lines: string[] = [];
  assert.equal(
    await bundled("src/main.ts", (line) => lines.push(line), { root, cache: path.join(root, "cache") }),
    null,
  );
  assert.match(lines.join("\n"), /bundle src\/main\.ts: could not build it \(.+\); running it through tsx/);
  await until("no esbuild service left running", async () => esbuildLeft().length === 0, 10_000);
});

test("two entries built at once in one process: both finish (one esbuild service, stopped after the last)", async () => {
  const root = path.join(scratch, "g");
  const cache = path.join(root, "cache");
  project(root);
  fs.writeFileSync(path.join(root, "src", "other.ts"), "console.log(JSON.stringify({ other: true }));");
  fs.utimesSync(path.join(root, "src", "other.ts"), HOUR_AGO, HOUR_AGO);
  const hang = new Promise<"hung">((resolve) => setTimeout(() => resolve("hung"), 30_000).unref());
  const both = await Promise.race([
    Promise.all([
      bundled("src/main.ts", undefined, { root, cache }),
      bundled("src/other.ts", undefined, { root, cache }),
    ]),
    hang,
  ]);
  assert.notEqual(both, "hung", "a build was left unanswered");
  const [main, other] = both as (string | null)[];
  assert.ok(main && other);
  assert.equal(run(other).other, true);
  await until("no esbuild service left running", async () => esbuildLeft().length === 0, 10_000);
});

test("a source with an mtime in the future (a skewed clock) is stamped: the next start reuses the bundle", async () => {
  const root = path.join(scratch, "h");
  const cache = path.join(root, "cache");
  project(root);
  const later = new Date(Date.now() + 3_600_000);
  fs.utimesSync(path.join(root, "src", "where.ts"), later, later);
  const lines: string[] = [];
  const first = await bundled("src/main.ts", (line) => lines.push(line), { root, cache });
  assert.equal(await bundled("src/main.ts", (line) => lines.push(line), { root, cache }), first);
  assert.equal(lines.filter((line) => line.includes("built in")).length, 1, lines.join("\n"));
});

test("a build removes the entry's bundles and temporary files unused for 10 minutes; the current ones and recent ones stay", async () => {
  const root = path.join(scratch, "old");
  const cache = path.join(root, "cache");
  project(root);
  const first = (await bundled("src/main.ts", undefined, { root, cache }))!;
  const name = path.basename(first).split(".")[0]!;
  const aged = (file: string) => {
    fs.writeFileSync(path.join(cache, file), "");
    fs.utimesSync(path.join(cache, file), HOUR_AGO, HOUR_AGO);
  };
  aged(`${name}.0123456789abcdef.mjs`); // a bundle no start has used for an hour
  aged(`${name}.0123456789abcdef.mjs.4242-abc.tmp`); // a start killed between write and rename
  fs.writeFileSync(path.join(cache, `${name}.fedcba9876543210.mjs.4343-def.tmp`), ""); // a build under way
  aged(`other-entry.0123456789abcdef.mjs`); // another entry's: not this build's to judge

  project(root, "changed");
  const second = await bundled("src/main.ts", undefined, { root, cache });
  assert.ok(second && second !== first);
  assert.deepEqual(
    fs.readdirSync(cache).sort(),
    [
      `${name}.fedcba9876543210.mjs.4343-def.tmp`,
      path.basename(first),
      path.basename(second),
      `${name}.json`,
      "other-entry.0123456789abcdef.mjs",
    ].sort(),
  );
});
