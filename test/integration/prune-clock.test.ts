/**
 * Abandoned work dirs and temporaries are judged by the filesystem's clock, not the pruning
 * worker's (clock skew between hosts sharing an output): a worker whose clock runs ten minutes
 * ahead (libfaketime) prunes what is really old, and leaves a live run's fresh work dir and a
 * writer's fresh temporary alone. Before, it took "now" from its own clock and removed them.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import crypto from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, test } from "node:test";
import { fileURLToPath } from "node:url";
import { stringify } from "yaml";
import { skewedClockEnv } from "../../scripts/faults/clock";

const HOST = fileURLToPath(new URL("../support/prune-host.ts", import.meta.url));
const root = fs.mkdtempSync(path.join(os.tmpdir(), "claimwatch-prune-clock-"));
after(() => fs.rmSync(root, { recursive: true, force: true }));

test("a worker ten minutes ahead prunes only what the filesystem's clock calls old", () => {
  const config = path.join(root, "claimwatch.yaml");
  fs.writeFileSync(
    config,
    stringify({
      rebuilds: {
        tiles: {
          output: "out/tiles",
          timeLimit: "1m",
          claim: { ttl: "2s", refreshEvery: "500ms" },
          steps: [{ name: "work", run: ["true"] }],
        },
      },
    }),
  );
  const output = path.join(root, "out/tiles");
  const work = path.join(output, ".work");
  const hourAgo = new Date(Date.now() - 3_600_000);
  fs.mkdirSync(path.join(work, "run-live-a1-f2-abcdef"), { recursive: true });
  fs.writeFileSync(path.join(work, "run-live-a1-f2-abcdef", "part.txt"), "being written\n");
  fs.mkdirSync(path.join(work, "run-dead-a1-f1-123456"), { recursive: true });
  fs.utimesSync(path.join(work, "run-dead-a1-f1-123456"), hourAgo, hourAgo);
  const temp = (prefix: string) => path.join(output, `${prefix}${crypto.randomBytes(6).toString("hex")}`);
  const freshTemp = temp(".published-fence-writing.");
  fs.writeFileSync(freshTemp, "a writer's, now");
  const oldTemp = temp(".current-");
  fs.symlinkSync("builds/x", oldTemp);
  fs.lutimesSync(oldTemp, hourAgo, hourAgo);

  const ran = spawnSync(process.execPath, ["--import", "tsx", HOST, config], {
    env: { ...process.env, ...skewedClockEnv("+10m") },
    encoding: "utf8",
    timeout: 60_000,
  });
  assert.equal(ran.status, 0, ran.stderr);
  assert.match(ran.stdout, /PRUNED/);
  const hostNow = Number(/NOW (\d+)/.exec(ran.stdout)?.[1]);
  assert.ok(hostNow - Date.now() > 9 * 60_000, `the host's clock runs ten minutes ahead (${hostNow - Date.now()} ms)`);

  assert.deepEqual(
    fs.readdirSync(work),
    ["run-live-a1-f2-abcdef"],
    "the live run's work dir stays; the dead one's goes",
  );
  assert.equal(fs.existsSync(freshTemp), true, "a writer's fresh temporary stays");
  assert.equal(fs.existsSync(oldTemp), false, "an hour-old temporary goes");
  assert.deepEqual(
    fs.readdirSync(output).sort(),
    [".clock", ".work", path.basename(freshTemp)].sort(),
    "nothing else added but the (empty) clock file",
  );
  assert.equal(fs.statSync(path.join(output, ".clock")).size, 0);
});
