/**
 * Starts the real stack exactly as a user's `npm start` does (scripts/start.ts) and stops it by
 * PID afterwards, checking it exits 0 and leaves no process (Redis, Next.js, worker) behind.
 */
import { spawn } from "node:child_process";
import crypto from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { freePort } from "../../lib/redis/embedded";
import { descendantPids, waitForLine, waitUntilGone } from "../../test/support/processes";
import type { Stack } from "./stack";
import { writeE2eDefinitions } from "./definitions";

export default async function globalSetup(): Promise<() => Promise<void>> {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "claimwatch-e2e-"));
  const port = await freePort();
  const tokens = {
    operator: crypto.randomBytes(18).toString("base64url"),
    viewer: crypto.randomBytes(18).toString("base64url"),
  };
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    PORT: String(port),
    HOST: "127.0.0.1",
    CLAIMWATCH_DATA_DIR: dataDir,
    CLAIMWATCH_CONFIG: writeE2eDefinitions(dataDir),
    CLAIMWATCH_OPERATOR_TOKEN: `alice:${tokens.operator}`,
    CLAIMWATCH_VIEWER_TOKEN: `victor:${tokens.viewer}`,
  };
  delete env.REDIS_URL;
  delete env.CLAIMS_REDIS_URL;

  const launcher = spawn(process.execPath, ["--import", "tsx", "scripts/start.ts"], {
    env,
    stdio: ["ignore", "pipe", "pipe"],
  });
  const log = fs.createWriteStream(path.join(dataDir, "launcher.log"));
  launcher.stdout.pipe(log);
  launcher.stderr.pipe(log);
  const url = `http://127.0.0.1:${port}`;
  await waitForLine(launcher, /claimwatch is running at/, 120_000);
  // The banner is green only with a live worker: wait for its first heartbeat.
  for (let i = 0; i < 100; i++) {
    const health = (await (
      await fetch(`${url}/api/health`, { headers: { authorization: `Bearer ${tokens.operator}` } })
    ).json()) as { workers: number | null };
    if ((health.workers ?? 0) > 0) break;
    await new Promise((r) => setTimeout(r, 200));
  }

  const stack: Stack = { url, dataDir, launcherPid: launcher.pid!, tokens };
  process.env.CLAIMWATCH_E2E_STACK = JSON.stringify(stack);

  return async () => {
    const children = descendantPids(launcher.pid!);
    const exited = new Promise<number | null>((resolve) => launcher.once("exit", (code) => resolve(code)));
    launcher.kill("SIGTERM");
    const code = await exited;
    const leftovers = await waitUntilGone(children, 5_000);
    // Kept beside the test results, so a failed run shows what the stack logged (scripts/test.sh
    // prints its tail when e2e fails).
    fs.mkdirSync("test-results/e2e", { recursive: true });
    fs.copyFileSync(path.join(dataDir, "launcher.log"), "test-results/e2e/launcher.log");
    fs.rmSync(dataDir, { recursive: true, force: true });
    if (code !== 0) throw new Error(`npm start exited ${code} on SIGTERM (expected 0)`);
    if (leftovers.length > 0) throw new Error(`processes left after npm start stopped: ${leftovers.join(", ")}`);
  };
}
