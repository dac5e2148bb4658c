/**
 * Published builds never change: `builds/<hash>` must always hash to `<hash>`. Steps are contained
 * (nothing of a run outlives it) and builds are read-only, but root, an operator or a broken disk
 * can still change bytes. Workers re-hash the `current` build of each output now and then (one
 * output per check, each output at most once per CHECK_EVERY_MS across all workers), and a changed
 * build found here or by `promoteBuild` is recorded in Redis: the health banner and the Rebuilds
 * page show it until a check finds it whole again (re-published) or gone. So is a build a repeat
 * found unreadable or unsyncable (EIO: the disk lost a write) and moved aside by `promoteBuild`:
 * it stays listed until an operator removes it.
 */
import fs from "node:fs/promises";
import path from "node:path";
import type { Redis } from "ioredis";
import type { RedisKeys } from "../redis/keys";
import { outputDirOf, tenantsOf, type Definitions } from "./definitions";
import { BUILD_HASH, buildDirOf, readCurrent, verifyBuilds } from "./output";

/** How often one output's `current` build is re-hashed, across all workers. */
export const CHECK_EVERY_MS = 10 * 60_000;

export interface ChangedBuild {
  /**
   * `changed`: its bytes no longer hash to its name. `unsynced`: reading or syncing it failed with
   * EIO (a lost write), so its bytes cannot be trusted; moved aside. Absent in older records: changed.
   */
  kind?: "changed" | "unsynced";
  path: string;
  rebuild: string;
  tenant: string | null;
  expected: string;
  actual: string;
  foundAt: number;
  foundBy: string;
}

export async function recordChangedBuild(client: Pick<Redis, "hset">, keys: RedisKeys, build: ChangedBuild) {
  await client.hset(keys.changedBuilds, build.path, JSON.stringify(build));
}

export async function listChangedBuilds(client: Pick<Redis, "hgetall">, keys: RedisKeys): Promise<ChangedBuild[]> {
  const all = await client.hgetall(keys.changedBuilds);
  const builds: ChangedBuild[] = [];
  for (const value of Object.values(all)) {
    try {
      builds.push(JSON.parse(value) as ChangedBuild);
    } catch {
      // a field written by something else: not ours to show
    }
  }
  return builds.sort((a, b) => a.path.localeCompare(b.path));
}

let rotation = 0;

/**
 * Re-hashes the `current` build of the next output in turn whose check lease this worker gets.
 * Returns log lines (what it found). Bounded: one build per call.
 */
export async function checkPublishedBuilds(
  client: Pick<Redis, "set" | "hset" | "hdel" | "hgetall">,
  keys: RedisKeys,
  definitions: Definitions,
  workerId: string,
): Promise<string[]> {
  const outputs = [...definitions.rebuilds.values()].flatMap((rebuild) =>
    tenantsOf(rebuild).map((tenant) => ({ rebuild, tenant })),
  );
  const lines: string[] = [];
  // Earlier findings first: one that was re-published or pruned since is cleared.
  // A build moved aside by promoteBuild stays listed until an operator removes it.
  for (const known of await listChangedBuilds(client, keys)) {
    const exists = await fs.stat(known.path).then(
      () => true,
      () => false,
    );
    const name = path.basename(known.path);
    let whole = false;
    if (exists && BUILD_HASH.test(name)) {
      // Re-hashed under the output's check lease, like `current`: once per period across workers.
      const lease = await client.set(
        keys.buildCheckLease(known.rebuild, known.tenant ?? undefined),
        workerId,
        "PX",
        CHECK_EVERY_MS,
        "NX",
      );
      if (lease !== "OK") continue;
      whole = (await verifyBuilds(path.dirname(path.dirname(known.path)), name)).changed.length === 0;
    }
    if (!exists || whole) {
      await client.hdel(keys.changedBuilds, known.path);
      lines.push(`changed build ${known.path} is ${exists ? "whole again" : "gone"}`);
    }
  }
  for (let i = 0; i < outputs.length; i++) {
    const { rebuild, tenant } = outputs[(rotation + i) % outputs.length]!;
    const outputDir = outputDirOf(rebuild, tenant);
    const current = await readCurrent(outputDir);
    if (!current) continue;
    const lease = await client.set(keys.buildCheckLease(rebuild.name, tenant), workerId, "PX", CHECK_EVERY_MS, "NX");
    if (lease !== "OK") continue;
    rotation = (rotation + i + 1) % outputs.length;
    const { changed } = await verifyBuilds(outputDir, current);
    for (const build of changed) {
      await recordChangedBuild(client, keys, {
        path: buildDirOf(outputDir, current),
        rebuild: rebuild.name,
        tenant: tenant ?? null,
        expected: build.expected,
        actual: build.actual,
        foundAt: Date.now(),
        foundBy: workerId,
      });
      lines.push(`PUBLISHED BUILD CHANGED: ${build.path} now hashes to ${build.actual}`);
    }
    break;
  }
  return lines;
}

/** Banner lines for changed builds. */
export async function changedBuildProblems(client: Pick<Redis, "hgetall">, keys: RedisKeys): Promise<string[]> {
  return (await listChangedBuilds(client, keys)).map((build) => {
    const output = `${build.rebuild}${build.tenant ? `/${build.tenant}` : ""}`;
    const found = `found ${new Date(build.foundAt).toISOString()} by ${build.foundBy}`;
    return build.kind === "unsynced"
      ? `The disk lost a write under ${output}: build ${build.expected} could not be read or synced (EIO), so a rebuild moved it aside to ${build.path} and replaced it (${found}); check the disk (dmesg, SMART), then delete ${build.path}`
      : `Published build of ${output} changed on disk: ${build.path} no longer matches its hash (${found}); run npx claimwatch verify ${build.rebuild}${build.tenant ? ` ${build.tenant}` : ""}`;
  });
}
