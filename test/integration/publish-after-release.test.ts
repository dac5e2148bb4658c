/**
 * An operator force-releases a claim in the last moment before its holder publishes (black-box
 * helper-182): the publish is refused at the holder's own fence — nobody newer holds the claim —
 * and the run's record must say that the claim stopped being its own, and who released it, not
 * name its own fence as "a newer holder". Real redis-server, a real rebuild through `runRebuild`;
 * the release is sent by the claims client itself right before the publish's script.
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, test } from "node:test";
import { claimName, forceReleaseClaim, readClaim, readPublished } from "../../lib/claims";
import { closeRedis, createRedis } from "../../lib/redis/client";
import { startRedisServer, type RedisServerHandle } from "../../lib/redis/embedded";
import { redisKeys } from "../../lib/redis/keys";
import { FENCED_PUBLISH, registerScripts } from "../../lib/redis/scripts";
import { loadDefinitions } from "../../lib/rebuilds/definitions";
import { readCurrent } from "../../lib/rebuilds/output";
import { runRebuild } from "../../lib/rebuilds/run-rebuild";
import { readRun, readRunLog } from "../../lib/runs/records";
import { newWorkerIdentity } from "../../lib/workers/heartbeat";

const servers: RedisServerHandle[] = [];
const root = fs.mkdtempSync(path.join(os.tmpdir(), "claimwatch-publish-release-"));
after(async () => {
  for (const server of servers) await server.stop(2_000).catch(() => {});
  fs.rmSync(root, { recursive: true, force: true });
});

test("a claim force-released just before its holder publishes: refused at its own fence, and the record names the release, not a newer holder", async () => {
  const server = await startRedisServer({ dir: path.join(root, "redis"), extraArgs: ["--save", ""] });
  servers.push(server);
  const file = path.join(root, "claimwatch.yaml");
  fs.writeFileSync(
    file,
    `rebuilds:\n  tiles:\n    output: out/tiles\n    claim: { ttl: 10s, refreshEvery: 3s }\n    steps: [{ name: s, run: ["sh", "-c", "echo $CLAIMWATCH_VERSION > $CLAIMWATCH_WORK/v"] }]\n`,
  );
  const loaded = loadDefinitions(file);
  if (!loaded.ok) throw loaded.error;
  const definitions = loaded.definitions;
  const keys = redisKeys("release");
  const main = createRedis(server.url, "worker", "publish-release-main");
  const claims = createRedis(server.url, "worker", "publish-release-claims");
  const operator = createRedis(server.url, "web", "publish-release-operator");
  try {
    const name = claimName(definitions.rebuilds.get("tiles")!.claimPath);
    // The operator acts between the holder's last look at its claim and its publish script.
    registerScripts(claims);
    const methods = claims as unknown as Record<string, (...args: unknown[]) => Promise<unknown>>;
    const publish = methods[FENCED_PUBLISH.command]!;
    let released: unknown = null;
    methods[FENCED_PUBLISH.command] = async function (this: unknown, ...args: unknown[]) {
      const held = await readClaim(operator, keys, name);
      assert.ok(held, "the claim is held at the publish");
      released = await forceReleaseClaim({ claims: operator, audit: operator }, keys, {
        name,
        token: held.token,
        actor: "alice",
        reason: "stuck at 02:00",
      });
      return publish.apply(this, args);
    };
    const outcome = await runRebuild(
      { main, claims, keys, definitions, worker: newWorkerIdentity("t") },
      {
        id: "job-1",
        attempt: 1,
        createdAt: Date.now(),
        data: { rebuild: "tiles", version: "v1", trigger: "api" },
        signal: new AbortController().signal,
      },
    );
    assert.equal((released as { status?: string } | null)?.status, "released", JSON.stringify(released));
    assert.equal(outcome.status, "deferred", JSON.stringify(outcome));
    // Nothing published: the pointer and `current` are untouched, the request is kept.
    assert.equal(await readPublished(main, keys, name), null);
    assert.equal(await readCurrent(definitions.rebuilds.get("tiles")!.outputPath), null);
    const record = await readRun(main, keys, "job-1-a1");
    assert.ok(record);
    assert.equal(record.status, "deferred");
    assert.doesNotMatch(record.reason ?? "", /a newer holder/);
    assert.match(
      record.reason ?? "",
      /^publish refused on .* \(fence \d+\): the claim was no longer this attempt's \(force-released or expired\), and nobody has taken it since; an operator had force-released it meanwhile \(by alice: “stuck at 02:00”/,
    );
    const log = (await readRunLog(main, keys, "job-1-a1")).join("\n");
    assert.match(log, /publish refused: fence \d+: the claim was no longer this attempt's/);
  } finally {
    await Promise.all([closeRedis(main), closeRedis(claims), closeRedis(operator)]);
  }
});
