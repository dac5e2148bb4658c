/** An output directory records the claim it is named by; another claim for it is refused (lib/rebuilds/output-claim.ts). */
import assert from "node:assert/strict";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import { OUTPUT_CLAIM_FILE, OutputClaimedElsewhereError, pinOutputClaim } from "../../lib/rebuilds/output-claim";

test("the first claim is recorded (the directory made), the same claim passes again, another is refused naming the first", async () => {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), "cw-output-claim-"));
  try {
    const dir = path.join(root, "out", "tiles");
    const real = path.join(fs.realpathSync(root), "out", "tiles");
    await pinOutputClaim(dir, "output:/srv/out/tiles", real);
    assert.equal(fs.readFileSync(path.join(dir, OUTPUT_CLAIM_FILE), "utf8"), "output:/srv/out/tiles\n");
    await pinOutputClaim(dir, "output:/srv/out/tiles", real);
    await assert.rejects(
      pinOutputClaim(dir, "output:/mnt/b/tiles", "/mnt/b/tiles"),
      (error: Error) =>
        error instanceof OutputClaimedElsewhereError &&
        /is the directory of claim 'output:\/srv\/out\/tiles'.*not of 'output:\/mnt\/b\/tiles'/.test(error.message),
    );
    assert.deepEqual(
      fs.readdirSync(dir).filter((name) => name !== OUTPUT_CLAIM_FILE),
      [],
      "no temporary file left",
    );
  } finally {
    fs.rmSync(root, { recursive: true, force: true });
  }
});

test("two paths racing for a new directory: one claim wins, the other is refused", async () => {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), "cw-output-claim-"));
  try {
    for (let round = 0; round < 20; round++) {
      const dir = path.join(root, `race-${round}`);
      const real = path.join(fs.realpathSync(root), `race-${round}`);
      const results = await Promise.allSettled([
        pinOutputClaim(dir, "output:/a/race", real),
        pinOutputClaim(dir, "output:/b/race", real),
      ]);
      assert.equal(results.filter((r) => r.status === "fulfilled").length, 1, `round ${round}`);
      const winner = fs.readFileSync(path.join(dir, OUTPUT_CLAIM_FILE), "utf8").trim();
      const won = results.findIndex((r) => r.status === "fulfilled");
      assert.equal(winner, won === 0 ? "output:/a/race" : "output:/b/race");
    }
  } finally {
    fs.rmSync(root, { recursive: true, force: true });
  }
});

test("nothing written by stale definitions (the directory's real path is another), and nothing refused by an empty file", async () => {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), "cw-output-claim-"));
  try {
    const dir = path.join(root, "stale");
    // A worker whose definitions name the directory by a real path it no longer has writes nothing.
    await pinOutputClaim(dir, "output:/old/release/stale", "/old/release/stale");
    assert.equal(fs.existsSync(path.join(dir, OUTPUT_CLAIM_FILE)), false);
    // An empty file (a crash before the content reached the disk) says nothing: no refusal.
    fs.writeFileSync(path.join(dir, OUTPUT_CLAIM_FILE), "");
    await pinOutputClaim(dir, "output:/any/stale", path.join(fs.realpathSync(root), "stale"));
  } finally {
    fs.rmSync(root, { recursive: true, force: true });
  }
});
