/**
 * Issue 14, defect 2: pruning never deletes a build that is the Redis pointer, `current`, or
 * being promoted and published — with `retention.builds` 0 and 1. Real Redis, real directories:
 * a holder between its promote and its publish, and a `current` a late stale swap moved away from
 * the published build.
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, test } from "node:test";
import { acquireClaim, claimName, publishFenced, releaseClaim } from "../../lib/claims";
import { createRedis } from "../../lib/redis/client";
import { redisKeys } from "../../lib/redis/keys";
import { loadDefinitions } from "../../lib/rebuilds/definitions";
import { buildDirOf, hashDirectory, pointCurrent, promoteBuild, readCurrent } from "../../lib/rebuilds/output";
import { pruneOldBuilds } from "../../lib/rebuilds/prune";
import { startTestRedis, uniquePrefix } from "../support/redis";

const server = await startTestRedis();
const client = createRedis(server.url, "worker", "test-prune");
const roots: string[] = [];
after(() => {
  client.disconnect();
  for (const root of roots) fs.rmSync(root, { recursive: true, force: true });
});

function setup(builds: number) {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), "claimwatch-prune-"));
  roots.push(root);
  const file = path.join(root, "claimwatch.yaml");
  fs.writeFileSync(
    file,
    `retention:\n  builds: ${builds}\nrebuilds:\n  tiles:\n    output: out/tiles\n    claim: { ttl: 4s, refreshEvery: 1s }\n    steps: [{ name: s, run: ["true"] }]\n`,
  );
  const loaded = loadDefinitions(file);
  if (!loaded.ok) throw loaded.error;
  const definitions = loaded.definitions;
  const output = definitions.rebuilds.get("tiles")!.outputPath;
  fs.mkdirSync(output, { recursive: true });
  const keys = redisKeys(uniquePrefix("prune"));
  const name = claimName(definitions.rebuilds.get("tiles")!.claimPath);
  let n = 0;
  /** A finished work directory with `content`, as a run leaves it. */
  const work = (content: string) => {
    const dir = path.join(output, ".work", `run-${++n}`);
    fs.mkdirSync(dir, { recursive: true });
    fs.writeFileSync(path.join(dir, "data.txt"), content);
    return dir;
  };
  /** A full rebuild under the claim: promote, fenced publish, `current`. */
  const rebuild = async (content: string) => {
    const grant = await acquireClaim(client, keys, name, { jobId: `j${n}` }, { ttlMs: 4_000, refreshEveryMs: 1_000 });
    assert.equal(grant.status, "acquired");
    const { fence, token } = grant as { fence: number; token: string };
    const dir = work(content);
    const hash = await hashDirectory(dir);
    await promoteBuild(output, dir, hash);
    assert.equal((await publishFenced(client, keys, { name, fence, token, value: hash })).status, "published");
    await pointCurrent(output, hash);
    await releaseClaim(client, keys, name, token);
    return hash;
  };
  const prune = () => pruneOldBuilds(definitions, { client, keys, workerId: "test" });
  return { definitions, output, keys, name, work, rebuild, prune };
}

for (const builds of [0, 1]) {
  test(`retention.builds ${builds}: a reproduced build between its promote and its publish is not pruned`, async () => {
    const o = setup(builds);
    const h = await o.rebuild("H");
    await o.rebuild("G");
    await o.rebuild("F"); // H is now the oldest: what retention removes first
    // A run reproduces H: it holds the claim, promotes (drops its copy, touches H) …
    const grant = await acquireClaim(
      client,
      o.keys,
      o.name,
      { jobId: "again" },
      { ttlMs: 4_000, refreshEveryMs: 1_000 },
    );
    const { fence, token } = grant as { fence: number; token: string };
    const dir = o.work("H");
    await promoteBuild(o.output, dir, await hashDirectory(dir));
    // … every worker's heartbeat prunes meanwhile …
    await o.prune();
    // … and the run publishes H.
    assert.equal((await publishFenced(client, o.keys, { name: o.name, fence, token, value: h })).status, "published");
    await pointCurrent(o.output, h);
    assert.ok(fs.existsSync(buildDirOf(o.output, h)), "the published build exists");
    assert.equal(fs.readFileSync(path.join(buildDirOf(o.output, h), "data.txt"), "utf8"), "H");
    await releaseClaim(client, o.keys, o.name, token);
    await o.prune();
    assert.ok(fs.existsSync(buildDirOf(o.output, h)), "the published build survives the next prune too");
  });

  test(`retention.builds ${builds}: the published build survives a late stale swap of current`, async () => {
    const o = setup(builds);
    await o.rebuild("A");
    const old = await o.rebuild("B");
    const published = await o.rebuild("C");
    // A stale holder promoted D (newest on disk), then its publish was refused: D is not published.
    const stale = o.work("D");
    await promoteBuild(o.output, stale, await hashDirectory(stale));
    await pointCurrent(o.output, old); // a stale holder's late symlink swap
    await o.prune();
    assert.ok(fs.existsSync(buildDirOf(o.output, published)), "the Redis pointer's build is kept");
    assert.ok(fs.existsSync(buildDirOf(o.output, old)), "current's build is kept");
    assert.equal(await readCurrent(o.output), old);
  });
}
