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
import os from "node:os";
import path from "node:path";
import type { Redis } from "ioredis";
import type { RedisKeys } from "../redis/keys";
import { formatAbsolute } from "../time-text";
import { outputDirOf, tenantsOf, type Definitions } from "./definitions";
import { BUILD_HASH, buildDirOf, readCurrent, verifyBuilds } from "./output";

/** How often one output's `current` build is re-hashed, across all workers. */
export const CHECK_EVERY_MS = 10 * 60_000;

export interface ChangedBuild {
  /**
   * `changed`: its bytes no longer hash to its name. `unsynced`: reading or syncing it failed with
   * EIO (a lost write), so its bytes cannot be trusted; moved aside. `missing`: `current` points at
   * it and it is gone (deleted). Absent in older records: changed.
   */
  kind?: "changed" | "unsynced" | "missing";
  path: string;
  rebuild: string;
  tenant: string | null;
  expected: string;
  actual: string;
  foundAt: number;
  foundBy: string;
  /** The build directory's ctime when found (the filesystem's clock; absent when it was not there). */
  dirChangedAt?: number;
  /**
   * `missing` only: the host whose disk lacks it (outputs may be on each host's own disk); only
   * workers on that host look at it again.
   */
  host?: string;
}

export async function recordChangedBuild(client: Pick<Redis, "hset">, keys: RedisKeys, build: ChangedBuild) {
  // Its directory's change time as the filesystem stamped it: a later change (a re-publish renames
  // a new one in) is told by comparing two such times, never this host's or Redis's clock.
  const dirChangedAt = build.dirChangedAt ?? (await fs.stat(build.path).catch(() => null))?.ctimeMs;
  await client.hset(
    keys.changedBuilds,
    build.path,
    JSON.stringify(dirChangedAt === undefined ? build : { ...build, dirChangedAt }),
  );
}

/** A build `promoteBuild` moved aside: `builds/.<kind>-<hash>-<time>-<random>` (output.ts). */
const ASIDE_BUILD = /^\.(changed|unsynced)-([0-9a-f]{32})-\d+-[0-9a-f]+$/;

/**
 * Builds moved aside under `outputDir` (by `promoteBuild`) that no report names yet: one whose
 * promote then failed (a sync of builds/ gave EIO) or whose worker died before it reported
 * it. Recorded as found now, once (HSETNX: another worker's report of the same one stays).
 */
async function reportAsideBuilds(
  client: Pick<Redis, "hsetnx">,
  keys: RedisKeys,
  place: { rebuild: string; tenant: string | null; outputDir: string },
  known: ReadonlySet<string>,
  workerId: string,
): Promise<string[]> {
  const buildsDir = path.join(place.outputDir, "builds");
  const names = await fs.readdir(buildsDir).catch((error: NodeJS.ErrnoException) => {
    if (error.code === "ENOENT" || error.code === "ENOTDIR") return [] as string[];
    throw error;
  });
  const lines: string[] = [];
  for (const name of names) {
    const aside = ASIDE_BUILD.exec(name);
    const where = path.join(buildsDir, name);
    if (!aside || known.has(where)) continue;
    const kind = aside[1] as "changed" | "unsynced";
    const build: ChangedBuild = {
      kind,
      path: where,
      rebuild: place.rebuild,
      tenant: place.tenant,
      expected: aside[2]!,
      actual: kind === "changed" ? "(moved aside)" : "(lost write: moved aside)",
      foundAt: Date.now(),
      foundBy: workerId,
    };
    if ((await client.hsetnx(keys.changedBuilds, where, JSON.stringify(build))) === 1) {
      lines.push(`build moved aside (${kind}) found unreported: ${where}`);
    }
  }
  return lines;
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
  client: Pick<Redis, "set" | "hset" | "hsetnx" | "hdel" | "hgetall">,
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
  const reported = await listChangedBuilds(client, keys);
  const defined = new Set(outputs.map(({ rebuild, tenant }) => `${rebuild.name}/${tenant ?? ""}`));
  for (const known of reported) {
    // A rebuild or tenant taken out of the definitions: its outputs are no longer watched, and the
    // report's advice (verify it, rebuild it with force) could not be followed.
    if (!defined.has(`${known.rebuild}/${known.tenant ?? ""}`)) {
      await client.hdel(keys.changedBuilds, known.path);
      lines.push(
        `changed build ${known.path}: ${known.rebuild}${known.tenant ? `/${known.tenant}` : ""} is no longer defined, no longer watched`,
      );
      continue;
    }
    // Only a build that is not there any more is cleared: an unreadable one (EIO, EACCES) stays.
    let changedAt: number | null = null;
    const exists = await fs.stat(known.path).then(
      (stat) => ((changedAt = stat.ctimeMs), true),
      (error: NodeJS.ErrnoException) => error.code !== "ENOENT" && error.code !== "ENOTDIR",
    );
    const name = path.basename(known.path);
    if (known.kind === "missing") {
      lines.push(...(await recheckMissing(client, keys, known, exists)));
      continue;
    }
    let whole = false;
    if (exists && BUILD_HASH.test(name)) {
      // Re-hashed under the output's check lease, like `current`: once per period across workers;
      // at once when the directory was replaced since the finding (a rebuild published it again:
      // the promote renames a new one in).
      // (Findings of earlier versions have no directory time: their finder's clock, as before.)
      const replaced = changedAt !== null && changedAt > (known.dirChangedAt ?? known.foundAt);
      const lease = replaced
        ? "OK"
        : await client.set(
            keys.buildCheckLease(known.rebuild, known.tenant ?? undefined),
            workerId,
            "PX",
            CHECK_EVERY_MS,
            "NX",
          );
      if (lease !== "OK") continue;
      // A build that cannot be read is not whole.
      whole = await verifyBuilds(path.dirname(path.dirname(known.path)), name).then(
        (verified) => verified.changed.length === 0,
        () => false,
      );
      // Replaced, and changed again: found now (the next look waits for the lease).
      if (replaced && !whole) await recordChangedBuild(client, keys, { ...known, foundAt: Date.now() });
    }
    if (!exists || whole) {
      await client.hdel(keys.changedBuilds, known.path);
      lines.push(`changed build ${known.path} is ${exists ? "whole again" : "gone"}`);
    }
  }
  // Builds moved aside that nobody reported (a readdir of each output's builds/).
  const known = new Set(reported.map((build) => build.path));
  for (const { rebuild, tenant } of outputs) {
    const place = { rebuild: rebuild.name, tenant: tenant ?? null, outputDir: outputDirOf(rebuild, tenant) };
    lines.push(...(await reportAsideBuilds(client, keys, place, known, workerId)));
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
      if (build.missing && known.has(build.path)) continue; // reported already (its first finding stays)
      await recordChangedBuild(client, keys, {
        ...(build.missing ? { kind: "missing" as const, host: os.hostname() } : {}),
        path: buildDirOf(outputDir, current),
        rebuild: rebuild.name,
        tenant: tenant ?? null,
        expected: build.expected,
        actual: build.actual,
        foundAt: Date.now(),
        foundBy: workerId,
      });
      lines.push(
        build.missing
          ? `PUBLISHED BUILD MISSING: ${build.path} (current points at it)`
          : `PUBLISHED BUILD CHANGED: ${build.path} now hashes to ${build.actual}`,
      );
    }
    break;
  }
  return lines;
}

/**
 * A `missing` report looked at again (on the host whose disk lacked it): cleared once `current`
 * points elsewhere, or once the build is back and whole (re-hashed at once, without the check's
 * lease: it was just published again or restored); back but not whole, it is a changed build.
 */
async function recheckMissing(
  client: Pick<Redis, "hset" | "hdel">,
  keys: RedisKeys,
  known: ChangedBuild,
  exists: boolean,
): Promise<string[]> {
  if (known.host !== undefined && known.host !== os.hostname()) return [];
  const name = path.basename(known.path);
  const outputDir = path.dirname(path.dirname(known.path));
  if ((await readCurrent(outputDir)) !== name) {
    await client.hdel(keys.changedBuilds, known.path);
    return [`missing build ${known.path}: current points elsewhere now`];
  }
  if (!exists) return [];
  const verified = await verifyBuilds(outputDir, name).catch(() => null);
  const changed = verified ? verified.changed[0] : { actual: "(unreadable)" };
  if (!changed) {
    await client.hdel(keys.changedBuilds, known.path);
    return [`missing build ${known.path} is back and whole`];
  }
  // Changed in place (no kind: `changed` names a copy a rebuild moved aside).
  const { host: _host, kind: _kind, ...rest } = known;
  await recordChangedBuild(client, keys, { ...rest, actual: changed.actual, foundAt: Date.now() });
  return [`PUBLISHED BUILD CHANGED: ${known.path} is back but hashes to ${changed.actual}`];
}

/** Banner lines for changed builds. */
export async function changedBuildProblems(client: Pick<Redis, "hgetall">, keys: RedisKeys): Promise<string[]> {
  return (await listChangedBuilds(client, keys)).map((build) => {
    const output = `${build.rebuild}${build.tenant ? `/${build.tenant}` : ""}`;
    const found = `found ${formatAbsolute(build.foundAt, "utc")} by ${build.foundBy}`;
    const remove = `chmod -R u+w ${build.path} && rm -rf ${build.path}`;
    if (build.kind === "unsynced")
      return `The disk lost a write under ${output}: build ${build.expected} could not be read or synced (EIO), so a rebuild moved it aside to ${build.path} to build it again in its place (${found}; the run history says whether that publish took: a disk still failing fails it too); check the disk (dmesg, SMART), then delete it (it is read-only): ${remove}`;
    if (build.kind === "missing")
      return `The published build of ${output} is missing from disk: current points at ${build.path}, which is gone (${found}); rebuild its version with force to publish it again (a repeat without force is skipped as already rebuilt)`;
    if (build.kind === "changed")
      return `A published build of ${output} had changed on disk: a rebuild moved it aside to ${build.path} and published whole bytes of build ${build.expected} (${found}); find what wrote into it, then delete it (it is read-only): ${remove}`;
    return `Published build of ${output} changed on disk: ${build.path} no longer matches its hash (${found}); run npx claimwatch verify ${build.rebuild}${build.tenant ? ` ${build.tenant}` : ""}, and rebuild its version with force to replace it`;
  });
}
