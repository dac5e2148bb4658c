/**
 * Child processes of the launcher (`npm start`, `npm run web`): the Next.js server and the
 * worker. Each runs in its own process group so the launcher decides the shutdown order, and
 * each is stopped by the PID it was given — never by name.
 */
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import type { Config } from "../config";
import { entryArguments } from "./bundle.mjs";

/** How a child ended: its exit code, or the signal that killed it (both null: it never started). */
export interface ChildExit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

export interface Child {
  name: string;
  process: ChildProcess;
  exited: Promise<ChildExit>;
  /** SIGTERM, then SIGKILL after `graceMs`. Resolves when the process is gone. Idempotent. */
  stop(graceMs: number): Promise<void>;
}

function nextBin(root: string): string {
  return path.join(root, "node_modules", "next", "dist", "bin", "next");
}

export function hasBuild(root: string): boolean {
  return fs.existsSync(path.join(root, ".next", "BUILD_ID"));
}

/** What the dashboard's build is made from (paths from the root): a change to one builds it again. */
const DASHBOARD_SOURCES = [
  "app",
  "components",
  "lib",
  "public",
  "instrumentation.ts",
  "proxy.ts",
  "next.config.ts",
  "postcss.config.mjs",
  "tsconfig.json",
  "package.json",
  "package-lock.json",
];

/**
 * A source of the dashboard changed after its build (its mtime later than `.next/BUILD_ID`'s,
 * both stamped by the same filesystem): the first such path found, or null. An upgrade in place
 * (`git pull`, `npm ci`) leaves the old build behind, which would serve the old API beside the
 * new worker.
 */
export function changedSinceBuild(root: string): string | null {
  const builtAt = fs.statSync(path.join(root, ".next", "BUILD_ID")).mtimeMs;
  const newer = (relative: string): string | null => {
    const stat = fs.statSync(path.join(root, relative), { throwIfNoEntry: false });
    if (!stat) return null;
    if (!stat.isDirectory()) return stat.mtimeMs > builtAt ? relative : null;
    // A directory's mtime moves when an entry is added, removed or renamed in it.
    if (stat.mtimeMs > builtAt) return relative;
    for (const name of fs.readdirSync(path.join(root, relative))) {
      const found = newer(path.join(relative, name));
      if (found) return found;
    }
    return null;
  };
  for (const source of DASHBOARD_SOURCES) {
    const found = newer(source);
    if (found) return found;
  }
  return null;
}

/** Runs `next build` when no build exists, or its sources changed since. Returns false when the build failed. */
export function ensureBuild(root: string, say: (line: string) => void): boolean {
  if (hasBuild(root)) {
    const changed = changedSinceBuild(root);
    if (!changed) return true;
    say(`The dashboard's sources changed since its build (${changed}; an upgrade?): running \`next build\` again …`);
  } else say("No build of the dashboard yet: running `next build` (once; takes about a minute) …");
  const result = spawnSync(process.execPath, [nextBin(root), "build"], {
    cwd: root,
    stdio: "inherit",
    env: { ...process.env, NEXT_TELEMETRY_DISABLED: "1" },
  });
  return result.status === 0;
}

function startChild(name: string, command: string, args: string[], root: string, env: NodeJS.ProcessEnv): Child {
  const child = spawn(command, args, { cwd: root, env, stdio: "inherit", detached: true });
  const exited = new Promise<ChildExit>((resolve) => {
    child.once("exit", (code, signal) => resolve({ code, signal }));
    child.once("error", () => resolve({ code: null, signal: null }));
  });
  let stopping: Promise<void> | undefined;
  return {
    name,
    process: child,
    exited,
    stop(graceMs) {
      stopping ??= (async () => {
        if (child.exitCode !== null || child.signalCode !== null) return;
        try {
          child.kill("SIGCONT"); // a paused child cannot act on SIGTERM
          child.kill("SIGTERM");
        } catch {
          return;
        }
        const timer = setTimeout(() => child.kill("SIGKILL"), graceMs);
        await exited;
        clearTimeout(timer);
      })();
      return stopping;
    },
  };
}

export function startWeb(root: string, config: Config, env: NodeJS.ProcessEnv): Child {
  return startChild(
    "web",
    process.execPath,
    [nextBin(root), "start", "--hostname", config.host, "--port", String(config.port)],
    root,
    { ...env, NEXT_TELEMETRY_DISABLED: "1" },
  );
}

/** The worker's Node arguments: its bundle (./bundle.mjs), or its TypeScript through tsx. */
export function workerArguments(say: (line: string) => void): Promise<string[]> {
  return entryArguments("worker/index.ts", say);
}

export function startWorker(root: string, env: NodeJS.ProcessEnv, nodeArguments: string[]): Child {
  return startChild("worker", process.execPath, nodeArguments, root, env);
}

/**
 * Waits until the server answers HTTP (any status); false after `timeoutMs`, or once `givenUp()`
 * (its only process exited; a launcher that restarts it gives up only when it stops).
 */
export async function waitForHttp(url: string, givenUp: () => boolean, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline && !givenUp()) {
    try {
      await fetch(url, { signal: AbortSignal.timeout(2_500) });
      return true;
    } catch {
      await new Promise((r) => setTimeout(r, 200));
    }
  }
  return false;
}

/** The URL a user can open: a wildcard bind address is reached through loopback. */
export function browserUrl(config: Config): string {
  const host = config.host === "0.0.0.0" || config.host === "::" ? "127.0.0.1" : config.host;
  const shown = host.includes(":") && !host.startsWith("[") ? `[${host}]` : host;
  return `http://${shown}:${config.port}`;
}
