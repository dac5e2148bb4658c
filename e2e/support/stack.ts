/** Where the stack started by global setup lives; set in the environment the test workers inherit. */
import fs from "node:fs";
import path from "node:path";

export interface Stack {
  url: string;
  dataDir: string;
  launcherPid: number;
  tokens: { operator: string; viewer: string };
}

export function stack(): Stack {
  const raw = process.env.CLAIMWATCH_E2E_STACK;
  if (!raw) throw new Error("CLAIMWATCH_E2E_STACK is not set: run e2e through `playwright test` (global setup)");
  return JSON.parse(raw) as Stack;
}

/** PID of the embedded Redis the launcher started (recorded by the launcher itself). */
export function embeddedRedisPid(dataDir: string): number {
  const state = JSON.parse(fs.readFileSync(path.join(dataDir, "embedded-redis.json"), "utf8")) as { pid: number };
  return state.pid;
}

/** Headers that authenticate as the e2e operator (Bearer: no login page, no cookie). */
export function operatorHeaders(): Record<string, string> {
  return { authorization: `Bearer ${stack().tokens.operator}` };
}
