/**
 * Issue 14, defect 3: a claims Redis that loses recent writes (RDB-only persistence, killed with
 * -9 after a snapshot) must not make claimwatch grant a fence already used for a publish again,
 * nor move `current` back to an older build. A real redis-server, really killed and restarted on
 * the same data; real rebuilds through `runRebuild`.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, test } from "node:test";
import { claimName, readPublished } from "../../lib/claims";
import { closeRedis, createRedis } from "../../lib/redis/client";
import { startRedisServer, type RedisServerHandle } from "../../lib/redis/embedded";
import { redisKeys } from "../../lib/redis/keys";
import { loadDefinitions } from "../../lib/rebuilds/definitions";
import { readCurrent } from "../../lib/rebuilds/output";
import { repairCurrentLinks, REPAIR_AFTER_MS } from "../../lib/rebuilds/repair";
import { idempotencyKey } from "../../lib/rebuilds/version";
import { confirmRebuilt, rebuiltByNow } from "../../lib/rebuilds/rebuilt-by-now";
import { serverNow } from "../../lib/redis/time";
import { readRebuiltMark, renewRebuiltMark } from "../../lib/runs/rebuilt-mark";
import { runRebuild, type RebuildDeps } from "../../lib/rebuilds/run-rebuild";
import { newWorkerIdentity } from "../../lib/workers/heartbeat";

const RDB_ONLY = ["--appendonly", "no", "--save", ""];
const servers: RedisServerHandle[] = [];
const root = fs.mkdtempSync(path.join(os.tmpdir(), "claimwatch-crash-"));
after(async () => {
  for (const server of servers) await server.stop(2_000).catch(() => {});
  spawnSync("chattr", ["-R", "-i", root]); // an output left immutable by a test that failed midway
  fs.rmSync(root, { recursive: true, force: true });
});

/**
 * One rebuild (`name`, output `out/<name>`) on its own RDB-only redis-server under `root`, and a
 * way to attempt it in this process (runRebuild) against a client of that server.
 */
async function crashBed(name: string, yamlOf: (name: string) => string = simpleRebuild) {
  const dataDir = path.join(root, `redis-${name}`);
  const server = await startRedisServer({ dir: dataDir, extraArgs: RDB_ONLY });
  servers.push(server);
  const file = path.join(root, `claimwatch-${name}.yaml`);
  fs.writeFileSync(file, yamlOf(name));
  const loaded = loadDefinitions(file);
  if (!loaded.ok) throw loaded.error;
  const definitions = loaded.definitions;
  const keys = redisKeys(name);
  let jobs = 0;
  /** An attempt of a new job, or of the job `jobId` again (delivered again). */
  const attempt = (client: ReturnType<typeof createRedis>, version: string, jobId?: string, attemptNo = 1) => {
    const deps: RebuildDeps = { main: client, claims: client, keys, definitions, worker: newWorkerIdentity("t") };
    return runRebuild(deps, {
      id: jobId ?? `${name}-${++jobs}`,
      attempt: attemptNo,
      createdAt: Date.now(),
      data: { rebuild: name, version, trigger: "api" },
      signal: new AbortController().signal,
    });
  };
  return {
    server,
    dataDir,
    definitions,
    keys,
    output: definitions.rebuilds.get(name)!.outputPath,
    claim: claimName(definitions.rebuilds.get(name)!.claimPath),
    attempt,
  };
}

function simpleRebuild(name: string): string {
  return `rebuilds:\n  ${name}:\n    output: out/${name}\n    claim: { ttl: 4s, refreshEvery: 1s }\n    steps: [{ name: s, run: ["sh", "-c", "echo $CLAIMWATCH_VERSION > $CLAIMWATCH_WORK/v"] }]\n`;
}

/** A crash (SIGKILL: no shutdown save), then the server again on the same port and data. */
async function crashAndRestart(server: RedisServerHandle, dataDir: string): Promise<RedisServerHandle> {
  process.kill(server.pid, "SIGKILL");
  await new Promise<void>((resolve) =>
    server.child.exitCode !== null || server.child.signalCode !== null
      ? resolve()
      : server.child.once("exit", () => resolve()),
  );
  const restarted = await startRedisServer({ dir: dataDir, port: server.port, extraArgs: RDB_ONLY });
  servers.push(restarted);
  return restarted;
}

test("a job a crash of the Redis brought back after it published, with another version published since: it publishes nothing again, current stays at the newer build, and its record says why", async () => {
  const { server: first, dataDir, keys, output, attempt } = await crashBed("repeat");
  let client = createRedis(first.url, "worker", "crash-repeat-1");
  // A request joined job-a while it waited (a double submit): its mark is in the snapshot too.
  await client.set(keys.askedAgain("job-a"), "joined-before-its-run");
  await client.save(); // the snapshot the restart comes back to: nothing published, nothing finished
  const c = await attempt(client, "vC", "job-c");
  assert.equal(c.status, "rebuilt", JSON.stringify(c));
  const a = await attempt(client, "vA", "job-a");
  assert.equal(a.status, "rebuilt", JSON.stringify(a));
  const b = await attempt(client, "vB", "job-b");
  assert.equal(b.status, "rebuilt", JSON.stringify(b));
  const published = (b as Extract<typeof b, { status: "rebuilt" }>).buildHash;
  assert.equal(await readCurrent(output), published);
  await closeRedis(client);

  // The crash takes back both publishes, both records and vA's "rebuilt": job-a is delivered again.
  const second = await crashAndRestart(first, dataDir);
  client = createRedis(second.url, "worker", "crash-repeat-2");
  try {
    const again = await attempt(client, "vA", "job-a");
    assert.equal(again.status, "skipped", JSON.stringify(again));
    assert.equal(await readCurrent(output), published, "current went back to the repeated job's older build");
    const record = await client.hgetall(keys.run((again as { runId: string }).runId));
    assert.equal(record.status, "skipped");
    assert.match(record.reason ?? "", /^already-rebuilt: run job-a-a1 of this job published its build here before/);
    // Asked for again after the crash (a trigger folded into the waiting job): it publishes. So
    // does a job whose version is another than the one its run published (changed inputs).
    await client.set(keys.askedAgain("job-b"), String(Date.now()));
    const folded = await attempt(client, "vB", "job-b");
    assert.equal(folded.status, "rebuilt", JSON.stringify(folded));
    const changed = await attempt(client, "vC2", "job-c");
    assert.equal(changed.status, "rebuilt", JSON.stringify(changed));
    // A new request for vA is another request: it is built and published (the newest fence wins).
    const asked = await attempt(client, "vA");
    assert.equal(asked.status, "rebuilt", JSON.stringify(asked));
    assert.equal(await readCurrent(output), (a as { buildHash: string }).buildHash);
  } finally {
    await closeRedis(client);
  }
});

test("an attempt the queue's Redis forgot with its record after it published, picked up again under the same run id: one record, rebuilt, with its publish's fence and build (helper-151)", async () => {
  const { server, keys, output, claim, attempt } = await crashBed("forgot-pickup");
  const client = createRedis(server.url, "worker", "forgot-pickup");
  try {
    const first = await attempt(client, "vP", "job-p");
    assert.equal(first.status, "rebuilt", JSON.stringify(first));
    const { fence, buildHash } = first as Extract<typeof first, { status: "rebuilt" }>;
    // What a failover to a replica that had not received them takes back: the record, its
    // attempt's open marker, the version's "rebuilt" key and mark (the claims Redis keeps its pointer).
    await client.del(
      keys.run("job-p-a1"),
      keys.runOpenAttempt("job-p"),
      keys.idempotency(idempotencyKey("forgot-pickup", undefined, "vP")),
      keys.rebuiltNow(claim),
    );
    const again = await attempt(client, "vP", "job-p");
    assert.equal(again.status, "rebuilt", JSON.stringify(again));
    const record = await client.hgetall(keys.run("job-p-a1"));
    assert.equal(record.status, "rebuilt", JSON.stringify(record));
    assert.equal(Number(record.fence), fence);
    assert.equal(record.buildHash, buildHash);
    assert.match(
      record.reason ?? "",
      /^published by an earlier pickup of this same attempt; the queue's Redis forgot that pickup/,
    );
    assert.equal(await readCurrent(output), buildHash, "nothing published again");
  } finally {
    await closeRedis(client);
  }
});

test("a main Redis that lost the writes after a snapshot (the claims Redis did not): a request for the version published before is built again, not skipped as rebuilt; a mark the claims Redis confirms still skips (helper-142)", async () => {
  const { server: first, dataDir, definitions, keys, output, claim } = await crashBed("lostmark");
  const claimsServer = await startRedisServer({ dir: path.join(root, "redis-lostmark-claims"), extraArgs: RDB_ONLY });
  servers.push(claimsServer);
  const claims = createRedis(claimsServer.url, "worker", "lostmark-claims");
  let jobs = 0;
  const attempt = (main: ReturnType<typeof createRedis>, version: string) =>
    runRebuild(
      { main, claims, keys, definitions, worker: newWorkerIdentity("t") },
      {
        id: `lostmark-${++jobs}`,
        attempt: 1,
        createdAt: Date.now(),
        data: { rebuild: "lostmark", version, trigger: "api" },
        signal: new AbortController().signal,
      },
    );
  const laneOf = (version: string) => ({
    rebuild: "lostmark",
    tenant: undefined,
    idempotencyKey: idempotencyKey("lostmark", undefined, version),
    claim,
    outputDir: output,
  });
  let main = createRedis(first.url, "worker", "lostmark-1");
  try {
    const a = await attempt(main, "vA");
    assert.equal(a.status, "rebuilt", JSON.stringify(a));
    const buildA = (a as { buildHash: string }).buildHash;
    await main.save(); // the snapshot the restart comes back to: vA the version rebuilt and served
    const d = await attempt(main, "vD");
    assert.equal(d.status, "rebuilt", JSON.stringify(d));
    assert.equal(await readCurrent(output), (d as { buildHash: string }).buildHash);
    await closeRedis(main);

    // The main Redis comes back with vA marked rebuilt; the claims Redis knows vD was published since.
    let server = await crashAndRestart(first, dataDir);
    main = createRedis(server.url, "worker", "lostmark-2");
    assert.equal(
      await main.get(keys.idempotency(idempotencyKey("lostmark", undefined, "vA"))),
      (a as { runId: string }).runId,
      "the restarted Redis really came back with vA's mark",
    );
    assert.equal(await rebuiltByNow({ main, claims, keys }, laneOf("vA")), null, "the preview's answer: not rebuilt");
    const again = await attempt(main, "vA");
    assert.equal(again.status, "rebuilt", `a request for vA was dropped: ${JSON.stringify(again)}`);
    assert.equal(await readCurrent(output), buildA, "current does not serve vA");

    // Marked in this incarnation by its own publish: the next request skips at once.
    const repeat = await attempt(main, "vA");
    assert.equal(repeat.status, "skipped", JSON.stringify(repeat));
    // A restart that lost nothing of it: the mark is of another incarnation, but the claims
    // Redis's pointer names its run: skipped under the claim, nothing built.
    await main.save();
    await closeRedis(main);
    server = await crashAndRestart(server, dataDir);
    main = createRedis(server.url, "worker", "lostmark-3");
    assert.equal(
      await rebuiltByNow({ main, claims, keys }, laneOf("vA")),
      (again as { runId: string }).runId,
      "confirmed by the claims Redis",
    );
    const fenceBefore = Number(await claims.get(keys.claimFence(claim)));
    const confirmed = await attempt(main, "vA");
    assert.equal(confirmed.status, "skipped", JSON.stringify(confirmed));
    const record = await main.hgetall(keys.run((confirmed as { runId: string }).runId));
    assert.equal(record.status, "skipped");
    assert.match(record.reason ?? "", /already rebuilt by run /);
    assert.equal(record.buildHash ?? "", "", "nothing was built");
    assert.equal(await readCurrent(output), buildA);
    assert.equal(Number(await claims.get(keys.claimFence(claim))), fenceBefore + 1, "it took the claim to confirm");
    // Confirmed under the claim, the mark counts again: the next request skips at once (no claim).
    const fast = await attempt(main, "vA");
    assert.equal(fast.status, "skipped", JSON.stringify(fast));
    assert.equal(Number(await claims.get(keys.claimFence(claim))), fenceBefore + 1, "the next request took the claim");
  } finally {
    await closeRedis(main);
    await closeRedis(claims);
  }
});

test("the main and the claims Redis on one server, both losing the writes after a snapshot: a request for the version published before is built again (the output's fence record is past the restored pointer: review helper-144)", async () => {
  const { server: first, dataDir, keys, output, claim, attempt } = await crashBed("samelost");
  let client = createRedis(first.url, "worker", "samelost-1");
  try {
    const a = await attempt(client, "vA");
    assert.equal(a.status, "rebuilt", JSON.stringify(a));
    await client.save();
    const d = await attempt(client, "vD");
    assert.equal(d.status, "rebuilt", JSON.stringify(d));
    await closeRedis(client);
    const second = await crashAndRestart(first, dataDir);
    client = createRedis(second.url, "worker", "samelost-2");
    // Both came back as they were at the snapshot: vA marked, the pointer naming vA's run.
    assert.equal((await readPublished(client, keys, claim))?.runId, (a as { runId: string }).runId);
    const lane = {
      rebuild: "samelost",
      tenant: undefined,
      idempotencyKey: idempotencyKey("samelost", undefined, "vA"),
      claim,
      outputDir: output,
    };
    assert.equal(await rebuiltByNow({ main: client, claims: client, keys }, lane), null, "the preview's answer");
    const again = await attempt(client, "vA");
    assert.equal(again.status, "rebuilt", `a request for vA was dropped: ${JSON.stringify(again)}`);
    assert.equal(await readCurrent(output), (a as { buildHash: string }).buildHash);
  } finally {
    await closeRedis(client);
  }
});

test("a mark counts only in its server's incarnation: a primary failed over and back (its run_id unchanged, its replication id new) does not count a mark made before (review helper-144)", async () => {
  const { server: p, keys, claim, attempt } = await crashBed("failback");
  const replica = await startRedisServer({ dir: path.join(root, "redis-failback-replica"), extraArgs: RDB_ONLY });
  servers.push(replica);
  const primary = createRedis(p.url, "worker", "failback-p");
  const other = createRedis(replica.url, "worker", "failback-r");
  const lane = { claim, idempotencyKey: idempotencyKey("failback", undefined, "vA") };
  const synced = async (replicaClient: typeof primary) => {
    for (let i = 0; i < 100; i++) {
      if (/master_link_status:up/.test(await replicaClient.info("replication"))) return;
      await new Promise((r) => setTimeout(r, 100));
    }
    throw new Error("the replica did not sync");
  };
  try {
    const a = await attempt(primary, "vA");
    assert.equal(a.status, "rebuilt", JSON.stringify(a));
    assert.equal((await readRebuiltMark(primary, keys, lane)).mark?.counts, true);
    const runIdBefore = /run_id:(\w+)/.exec(await primary.info("server"))![1];
    // The replica follows, is promoted; the old primary follows it, and is promoted back.
    await other.replicaof("127.0.0.1", p.port);
    await synced(other);
    await other.replicaof("NO", "ONE");
    await primary.replicaof("127.0.0.1", replica.port);
    await synced(primary);
    await primary.replicaof("NO", "ONE");
    assert.equal(/run_id:(\w+)/.exec(await primary.info("server"))![1], runIdBefore, "the same process");
    const mark = (await readRebuiltMark(primary, keys, lane)).mark;
    assert.equal(mark?.by, (a as { runId: string }).runId, "the mark came back with the data");
    assert.equal(mark?.counts, false, "a mark of the primary before its failovers counted");
  } finally {
    await closeRedis(primary);
    await closeRedis(other);
  }
});

test("a Redis whose ACL refuses INFO cannot tell a restart: its marks never count for a skip, and a repeat still skips through the claim", async () => {
  const { server, keys, claim, attempt } = await crashBed("noinfo");
  const admin = createRedis(server.url, "worker", "noinfo-admin");
  await admin.acl("SETUSER", "noinfo", "on", ">pw", "~*", "&*", "+@all", "-info");
  const client = createRedis(server.url.replace("redis://", "redis://noinfo:pw@"), "worker", "noinfo");
  const lane = { claim, idempotencyKey: idempotencyKey("noinfo", undefined, "vA") };
  try {
    await assert.rejects(client.info("server"), /NOPERM/, "the ACL refuses INFO");
    const a = await attempt(client, "vA");
    assert.equal(a.status, "rebuilt", JSON.stringify(a));
    const mark = (await readRebuiltMark(client, keys, lane)).mark;
    assert.equal(mark?.by, (a as { runId: string }).runId);
    assert.equal(mark?.counts, false, "a mark made where INFO is refused counted: a restart would go unseen");
    const again = await attempt(client, "vA");
    assert.equal(again.status, "skipped", JSON.stringify(again));
  } finally {
    await closeRedis(client);
    await closeRedis(admin);
  }
});

test("a mark of another incarnation is confirmed only by the very publish the output recorded, with no grant above it, and made to count again only while the claim is held (review helper-145)", async () => {
  const { server, keys, output, claim, attempt } = await crashBed("confirm");
  const client = createRedis(server.url, "worker", "confirm-1");
  try {
    const a = await attempt(client, "vA");
    assert.equal(a.status, "rebuilt", JSON.stringify(a));
    const runA = (a as { runId: string }).runId;
    const lane = { claim, idempotencyKey: idempotencyKey("confirm", undefined, "vA") };
    // As a restart leaves it: marked in another incarnation.
    await client.hset(keys.rebuiltNow(claim), "markedIn", "an-earlier-incarnation");
    const { mark } = await readRebuiltMark(client, keys, lane);
    assert.deepEqual(mark, { by: runA, counts: false });
    const pointer = await readPublished(client, keys, claim);
    assert.deepEqual(await confirmRebuilt(client, keys, { claim, outputDir: output }, mark), {
      by: runA,
      fence: pointer!.fence,
    });
    // An output directory this host does not see confirms nothing.
    assert.equal(await confirmRebuilt(client, keys, { claim, outputDir: path.join(root, "nowhere") }, mark), null);
    // A grant above the pointer (a publish under way, its record not on the disk yet) neither,
    // unless it is the caller's own.
    const granted = path.join(output, "builds", `.granted-fence@${pointer!.fence + 3}`);
    fs.writeFileSync(granted, "");
    try {
      assert.equal(await confirmRebuilt(client, keys, { claim, outputDir: output }, mark), null);
      assert.equal(
        (await confirmRebuilt(client, keys, { claim, outputDir: output }, mark, pointer!.fence + 3))?.by,
        runA,
      );
    } finally {
      fs.rmSync(granted);
    }
    // Made to count again only before the claim's held-until time.
    const now = await serverNow(client);
    assert.equal(
      await renewRebuiltMark(client, keys, lane, { by: runA, fence: pointer!.fence, heldUntil: now - 1 }),
      false,
    );
    assert.equal((await readRebuiltMark(client, keys, lane)).mark?.counts, false);
    assert.equal(
      await renewRebuiltMark(client, keys, lane, { by: runA, fence: pointer!.fence, heldUntil: now + 60_000 }),
      true,
    );
    assert.equal((await readRebuiltMark(client, keys, lane)).mark?.counts, true);
  } finally {
    await closeRedis(client);
  }
});

test("a job that published, then came back as its next attempt with its run's record closed aborted (a snapshot caught it mid-run): it publishes nothing again", async () => {
  const { server, keys, output, claim, attempt } = await crashBed("midrun");
  const client = createRedis(server.url, "worker", "midrun-1");
  try {
    const a = await attempt(client, "vA", "job-m");
    assert.equal(a.status, "rebuilt", JSON.stringify(a));
    const b = await attempt(client, "vB", "job-n");
    assert.equal(b.status, "rebuilt", JSON.stringify(b));
    // What the restored Redis holds: job-m's run closed aborted (its worker gone, the pointer
    // naming another run: no proof of its publish), its "rebuilt" key gone (vB's publish over it
    // took it already: vA is no longer what the output serves).
    await client.hset(keys.run((a as { runId: string }).runId), "status", "aborted");
    await client.del(keys.idempotency(idempotencyKey("midrun", undefined, "vA")));
    assert.equal(await client.exists(keys.idempotency(idempotencyKey("midrun", undefined, "vA"))), 0);
    // Nor is its run on the disk's list (as when its holder paused between its publish and its
    // fence record): the claims Redis's list, pushed by the publish itself, names it.
    const listing = fs.readdirSync(output).filter((name) => /^\.published-run@\d+@job-m-a1$/.test(name));
    assert.equal(listing.length, 1, fs.readdirSync(output).join(" "));
    assert.match(fs.readlinkSync(path.join(output, listing[0]!)), /^vA /);
    fs.rmSync(path.join(output, listing[0]!));
    // (The list a worker of the earlier version reads too.)
    const legacy = path.join(output, ".published-fence");
    const { jobs, ...rest } = JSON.parse(fs.readFileSync(legacy, "utf8")) as { jobs?: string[] };
    assert.ok(
      jobs?.some((line) => line.startsWith("job-m-a1 vA ")),
      JSON.stringify(jobs),
    );
    fs.writeFileSync(legacy, JSON.stringify(rest));
    assert.ok((await client.lrange(keys.publishedRuns(claim), 0, -1)).some((line) => line.startsWith("job-m-a1 vA ")));
    const again = await attempt(client, "vA", "job-m", 2);
    assert.equal(again.status, "skipped", JSON.stringify(again));
    const record = await client.hgetall(keys.run((again as { runId: string }).runId));
    assert.match(record.reason ?? "", /^already-rebuilt: run job-m-a1 of this job published its build here before/);
    assert.equal(await readCurrent(output), (b as { buildHash: string }).buildHash);
  } finally {
    await closeRedis(client);
  }
});

test("a job whose two attempts published, the second for a request that joined it, brought back with the claims Redis's list gone back to the first only: the attempt that saw the job's mark is the one it skips by, not the last listed (review helper-169)", async () => {
  const { server, keys, output, claim, attempt } = await crashBed("marks");
  const client = createRedis(server.url, "worker", "marks-1");
  try {
    await client.set(keys.askedAgain("job-x"), "m0");
    const first = await attempt(client, "vA", "job-x");
    assert.equal(first.status, "rebuilt", JSON.stringify(first));
    // A request joined, and a crash lost the job's completion and vA's "rebuilt" key: delivered
    // again, it publishes for that request.
    await client.set(keys.askedAgain("job-x"), "m1");
    await client.del(keys.idempotency(idempotencyKey("marks", undefined, "vA")));
    const second = await attempt(client, "vA", "job-x", 2);
    assert.equal(second.status, "rebuilt", JSON.stringify(second));
    const newer = await attempt(client, "vB", "job-y");
    assert.equal(newer.status, "rebuilt", JSON.stringify(newer));
    // The claims Redis's list back to before attempt 2's publish; vA's "rebuilt" key gone (vB's
    // publish took it); the queue's Redis brings job-x back as its attempt 3, its mark m1.
    for (const line of await client.lrange(keys.publishedRuns(claim), 0, -1))
      if (line.startsWith("job-x-a2 ")) await client.lrem(keys.publishedRuns(claim), 0, line);
    await client.del(keys.idempotency(idempotencyKey("marks", undefined, "vA")));
    const again = await attempt(client, "vA", "job-x", 3);
    assert.equal(again.status, "skipped", JSON.stringify(again));
    const record = await client.hgetall(keys.run((again as { runId: string }).runId));
    assert.match(record.reason ?? "", /^already-rebuilt: run job-x-a2 of this job published its build here before/);
    assert.equal(await readCurrent(output), (newer as { buildHash: string }).buildHash, "current stays at vB");
  } finally {
    await closeRedis(client);
  }
});

test("after a claims Redis lost its recent writes: no fence used for a publish is granted again, current is not rolled back", async () => {
  const { server: first, dataDir, definitions, keys, output, claim: name, attempt } = await crashBed("tiles");
  const rebuild = async (client: ReturnType<typeof createRedis>, version: string) => {
    const outcome = await attempt(client, version);
    assert.equal(outcome.status, "rebuilt", JSON.stringify(outcome));
    return outcome as Extract<typeof outcome, { status: "rebuilt" }>;
  };

  let client = createRedis(first.url, "worker", "crash-1");
  const v1 = await rebuild(client, "v1");
  await client.save(); // the snapshot the restart will come back to
  await rebuild(client, "v2");
  const v3 = await rebuild(client, "v3");
  assert.equal(await readCurrent(output), v3.buildHash);
  await closeRedis(client);

  // Crash: no shutdown save. The fences and the pointer of v2 and v3 are gone.
  const second = await crashAndRestart(first, dataDir);
  client = createRedis(second.url, "worker", "crash-2");
  try {
    const pointer = await readPublished(client, keys, name);
    assert.equal(pointer?.fence, v1.fence, "the restarted Redis really lost the later publishes");

    // Repair looks only at pointers older than REPAIR_AFTER_MS (a publish may be swapping current).
    while (Date.now() - (pointer?.publishedAt ?? 0) < REPAIR_AFTER_MS + 500)
      await new Promise((r) => setTimeout(r, 200));
    const repairs = await repairCurrentLinks(client, keys, definitions);
    assert.equal(await readCurrent(output), v3.buildHash, "current was not moved back to the older v1 build");
    // The pointer Redis forgot is put back from the output's durable record, and the counter
    // raised past it, before any new holder comes.
    const restored = await readPublished(client, keys, name);
    assert.deepEqual([restored?.fence, restored?.value], [v3.fence, v3.buildHash], JSON.stringify(repairs));
    assert.ok(Number(await client.get(keys.claimFence(name))) >= v3.fence, "the fence counter is raised too");
    assert.ok(
      repairs.some((line) => line.startsWith("restored the claims Redis pointer")),
      JSON.stringify(repairs),
    );

    const v4 = await rebuild(client, "v4");
    assert.ok(v4.fence > v3.fence, `fence ${v4.fence} granted after ${v3.fence} was used for a publish`);
    assert.equal(await readCurrent(output), v4.buildHash);
    assert.equal((await readPublished(client, keys, name))?.fence, v4.fence);
  } finally {
    await closeRedis(client);
  }
});

test("a publish whose fence record the disk refused, then forgotten by a claims Redis crash: its fence is not granted again, and current never named its build", async (t) => {
  const { server: first, dataDir, output, claim: name, keys, attempt } = await crashBed("maps");
  let client = createRedis(first.url, "worker", "refused-1");
  const v1 = await attempt(client, "v1");
  assert.equal(v1.status, "rebuilt", JSON.stringify(v1));
  if (v1.status !== "rebuilt") return;
  await client.save(); // the snapshot the restart will come back to

  // The disk refuses new names in the output directory (immutable: EPERM, even for root), so
  // the fence record cannot be written; builds/ and .work/ below it still take the build.
  const immutable = spawnSync("chattr", ["+i", output], { encoding: "utf8" });
  if (immutable.status !== 0) return t.skip(`chattr +i is not available here: ${immutable.stderr}`);
  let refused: unknown;
  try {
    await attempt(client, "v2").then(
      (outcome) => assert.fail(`v2 was not refused: ${JSON.stringify(outcome)}`),
      (error: unknown) => (refused = error),
    );
  } finally {
    spawnSync("chattr", ["-i", output]);
  }
  assert.match(String(refused), /its fence could not be recorded on disk/);
  const redisOnly = await readPublished(client, keys, name);
  assert.ok(redisOnly && redisOnly.fence > v1.fence, "the v2 publish went through in Redis");
  assert.equal(await readCurrent(output), v1.buildHash, "current never named the unrecorded build");
  await closeRedis(client);

  // Crash: the v2 publish and its fence are gone from Redis; the disk record says v1's fence.
  const second = await crashAndRestart(first, dataDir);
  client = createRedis(second.url, "worker", "refused-2");
  try {
    assert.equal((await readPublished(client, keys, name))?.fence, v1.fence, "the restart really lost the v2 publish");
    // The next grant is above the fence v2 published with in Redis (its granted mark in builds/),
    // not v1's fence + 1, which would be that same fence again (this failed so without the mark).
    const v3 = await attempt(client, "v3");
    assert.equal(v3.status, "rebuilt", JSON.stringify(v3));
    if (v3.status !== "rebuilt") return;
    assert.ok(v3.fence > redisOnly.fence, `fence ${v3.fence} granted after ${redisOnly.fence} was used for a publish`);
    assert.equal(await readCurrent(output), v3.buildHash);
    assert.deepEqual(
      fs.readdirSync(path.join(output, "builds")).filter((n) => n.startsWith(".granted-fence@")),
      [],
      "the granted marks the record covers are gone",
    );
  } finally {
    await closeRedis(client);
  }
});

test("a grant a claims Redis crash forgot while its holder still runs: the next grant is above it, and its steps start only once the first holder's step has stopped", async () => {
  const journal = path.join(root, "archive-journal");
  // The step journals its start and its stop (SIGTERM from its holder) with its fence, then
  // writes for a while: long enough that only a lost claim ends it.
  const step = `echo "start $CLAIMWATCH_VERSION $CLAIMWATCH_FENCE $(date +%s%N)" >> ${journal}; trap 'echo "stop $CLAIMWATCH_VERSION $CLAIMWATCH_FENCE $(date +%s%N)" >> ${journal}; exit 1' TERM; i=0; while [ $i -lt 40 ]; do sleep 0.25; i=$((i+1)); done; echo "stop $CLAIMWATCH_VERSION $CLAIMWATCH_FENCE $(date +%s%N)" >> ${journal}; echo $CLAIMWATCH_VERSION > $CLAIMWATCH_WORK/v`;
  const {
    server: first,
    dataDir,
    attempt,
  } = await crashBed(
    "archive",
    (name) =>
      `rebuilds:\n  ${name}:\n    output: out/${name}\n    claim: { ttl: 4s, refreshEvery: 2s }\n` +
      `    steps: [{ name: s, killGrace: 1s, run: ["sh", "-c", ${JSON.stringify(step)}] }]\n`,
  );
  const lines = () =>
    (fs.existsSync(journal) ? fs.readFileSync(journal, "utf8") : "")
      .split("\n")
      .filter(Boolean)
      .map((line) => {
        const [kind, version, fence, ns] = line.split(" ");
        return { kind, version, fence: Number(fence), t: Number(BigInt(ns!) / 1_000_000n) };
      });
  let client = createRedis(first.url, "worker", "forgot-1");
  await client.save(); // the snapshot the restart comes back to: no grant in it
  const holderA = attempt(client, "vA");
  const deadline = Date.now() + 20_000;
  while (!lines().some((l) => l.kind === "start" && l.version === "vA")) {
    assert.ok(Date.now() < deadline, "vA's step never started");
    await new Promise((r) => setTimeout(r, 50));
  }
  // Crash: the grant of vA's claim is gone; its holder runs on until it learns so.
  const second = await crashAndRestart(first, dataDir);
  const other = createRedis(second.url, "worker", "forgot-2");
  try {
    const b = await attempt(other, "vB");
    const a = await holderA;
    assert.equal(b.status, "rebuilt", JSON.stringify(b));
    assert.notEqual(a.status, "rebuilt", `vA ran on without its claim: ${JSON.stringify(a)}`);
    const seen = lines();
    const startA = seen.find((l) => l.kind === "start" && l.version === "vA")!;
    const stopA = seen.find((l) => l.kind === "stop" && l.version === "vA");
    const startB = seen.find((l) => l.kind === "start" && l.version === "vB");
    assert.ok(stopA && startB, JSON.stringify(seen));
    assert.ok(
      startB.fence > startA.fence,
      `fence ${startB.fence} granted again after ${startA.fence} (Redis forgot it)`,
    );
    assert.ok(
      startB.t >= stopA.t,
      `vB's step started ${stopA.t - startB.t} ms before vA's step stopped: two holders of one claim (${JSON.stringify(seen)})`,
    );
  } finally {
    await closeRedis(other);
    client = client as ReturnType<typeof createRedis>;
    await closeRedis(client);
  }
});
