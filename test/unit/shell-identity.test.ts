import assert from "node:assert/strict";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import { identifyShellOperator } from "../../lib/auth/shell-identity";
import { parseConfig } from "../../lib/config";

function configIn(dataDir: string, env: Record<string, string> = {}) {
  const parsed = parseConfig({ CLAIMWATCH_DATA_DIR: dataDir, ...env }, "/srv");
  assert.ok(parsed.ok);
  return parsed.config;
}

test("the CLI's operator: the data dir's operator-token when no tokens are configured, else CLAIMWATCH_TOKEN", () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "claimwatch-identity-"));
  try {
    const missing = identifyShellOperator(configIn(dir), {});
    assert.ok(!missing.ok && missing.problem.includes(path.join(dir, "operator-token")), JSON.stringify(missing));
    fs.writeFileSync(path.join(dir, "operator-token"), "generated-operator-token-0123\n");
    const fromFile = identifyShellOperator(configIn(dir), {});
    assert.ok(fromFile.ok);
    assert.deepEqual([fromFile.identity.name, fromFile.identity.role], ["operator", "operator"]);
    assert.equal(fromFile.from, path.join(dir, "operator-token"));

    const configured = configIn(dir, { CLAIMWATCH_OPERATOR_TOKEN: "alice:alice-token-0123456789ab" });
    const none = identifyShellOperator(configured, {});
    assert.ok(!none.ok && /set CLAIMWATCH_TOKEN/.test(none.problem), "the file is no credential then");
    const alice = identifyShellOperator(configured, { CLAIMWATCH_TOKEN: "alice-token-0123456789ab" });
    assert.ok(alice.ok && alice.identity.name === "alice");
    const stranger = identifyShellOperator(configured, { CLAIMWATCH_TOKEN: "generated-operator-token-0123" });
    assert.ok(!stranger.ok && stranger.identity === null && /not one this claimwatch accepts/.test(stranger.problem));
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
