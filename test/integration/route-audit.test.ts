/**
 * The route wrapper (lib/api/handler.ts) on a real Redis: an allowed mutation that ends in an
 * error is in the audit log as failed (it may have changed part of what it was asked), without
 * the error's own words (they can name hosts and paths); a refused one as refused.
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, test } from "node:test";
import { stringify } from "yaml";
import { route } from "../../lib/api/handler";
import { ApiError } from "../../lib/api/errors";
import { listAudit, noteAuditedFailure } from "../../lib/audit";
import { parseConfig } from "../../lib/config";
import { loadDefinitions } from "../../lib/rebuilds/definitions";
import { openContext, type WebContext } from "../../lib/web/context";
import { startTestRedis, uniquePrefix } from "../support/redis";

const dir = fs.mkdtempSync(path.join(os.tmpdir(), "claimwatch-route-audit-"));
after(() => fs.rmSync(dir, { recursive: true, force: true }));
const TOKEN = "route-audit-operator-0123456789";

test("an allowed mutation that fails is audited as failed; a refused one as refused", async () => {
  const redis = await startTestRedis();
  const configFile = path.join(dir, "claimwatch.yaml");
  fs.writeFileSync(
    configFile,
    stringify({ rebuilds: { tiles: { output: "out/tiles", steps: [{ name: "noop", run: ["true"] }] } } }),
  );
  const parsed = parseConfig(
    {
      REDIS_URL: redis.url,
      CLAIMWATCH_CONFIG: configFile,
      CLAIMWATCH_DATA_DIR: path.join(dir, ".data"),
      CLAIMWATCH_KEY_PREFIX: uniquePrefix("route"),
      CLAIMWATCH_OPERATOR_TOKEN: `ops:${TOKEN}`,
    },
    dir,
  );
  assert.ok(parsed.ok, parsed.ok ? "" : parsed.error.message);
  const loaded = loadDefinitions(configFile);
  assert.ok(loaded.ok);
  const context = openContext(parsed.config, loaded.definitions, "route-audit");
  const holder = globalThis as typeof globalThis & { __claimwatchWeb?: WebContext };
  holder.__claimwatchWeb = context;
  try {
    const post = () =>
      new Request("http://127.0.0.1:3000/api/rebuilds/tiles/runs", {
        method: "POST",
        headers: { authorization: `Bearer ${TOKEN}` },
      });
    const failing = route({ role: "operator", mutation: "trigger" }, async () => {
      throw new Error("disk /srv/secret on host db-7 said EIO");
    });
    const failed = await failing(post());
    assert.equal(failed.status, 500);
    const refusing = route({ role: "operator", mutation: "trigger" }, async () => {
      throw new ApiError(409, "conflict", "not now");
    });
    assert.equal((await refusing(post())).status, 409);

    // Not twice (an operation that audited its failure itself), not with Redis unreachable (503).
    const auditedItself = route({ role: "operator", mutation: "trigger" }, async () => {
      const error = new Error("its own entry says so");
      noteAuditedFailure(error);
      throw error;
    });
    assert.equal((await auditedItself(post())).status, 500);
    const unreachable = route({ role: "operator", mutation: "trigger" }, async () => {
      throw new Error("connect ECONNREFUSED 127.0.0.1:6380");
    });
    assert.equal((await unreachable(post())).status, 503);

    const { entries } = await listAudit(context.connections.main, context.connections.keys, { limit: 10 });
    assert.deepEqual(
      entries.map((entry) => [entry.action, entry.result, entry.actor, entry.reason]),
      [
        ["trigger", "refused", "ops (operator)", "409 conflict: not now"],
        ["trigger", "failed", "ops (operator)", "500 internal: internal error; see the server log"],
      ],
    );
    assert.deepEqual(entries[1]!.detail, { path: "/api/rebuilds/tiles/runs", method: "POST" });
  } finally {
    delete holder.__claimwatchWeb;
    await context.close();
  }
});
