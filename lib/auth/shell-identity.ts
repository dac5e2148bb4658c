/**
 * Who runs a mutation from a shell (the `claimwatch` CLI): the token in `CLAIMWATCH_TOKEN`, or —
 * where no tokens are configured — the operator token that `npm start` generated into the data
 * dir. The token is checked against the same credentials the API accepts as a Bearer token, so
 * the audit log names the same operator whichever way they act.
 */
import fs from "node:fs";
import type { Config } from "../config";
import { credentialsFrom, findCredential, operatorTokenPath } from "./credentials";
import type { Identity } from "./guard";

/** The environment variable a shell user puts their token in. */
export const SHELL_TOKEN_VARIABLE = "CLAIMWATCH_TOKEN";

export type ShellIdentity =
  | { ok: true; identity: Identity; from: string }
  /** `identity`: who presented a valid token without the operator role (for the audit log). */
  | { ok: false; problem: string; identity: Identity | null };

export function identifyShellOperator(config: Config, env: Record<string, string | undefined>): ShellIdentity {
  const configured = config.operatorTokens.length + config.viewerTokens.length > 0;
  let token = env[SHELL_TOKEN_VARIABLE]?.trim() || undefined;
  let from = SHELL_TOKEN_VARIABLE;
  if (!token && !configured) {
    const file = operatorTokenPath(config.dataDir);
    try {
      token = fs.readFileSync(file, "utf8").trim() || undefined;
      from = file;
    } catch {
      return {
        ok: false,
        identity: null,
        problem: `this needs an operator identity: set ${SHELL_TOKEN_VARIABLE} to an operator token, or run where the data dir's token file ${file} can be read (the first \`npm start\` writes it when no tokens are configured; when the server has CLAIMWATCH_OPERATOR_TOKEN or CLAIMWATCH_VIEWER_TOKEN, run this with the server's environment)`,
      };
    }
  }
  if (!token) {
    return {
      ok: false,
      identity: null,
      problem: `this needs an operator identity: CLAIMWATCH_OPERATOR_TOKEN / CLAIMWATCH_VIEWER_TOKEN are configured, so set ${SHELL_TOKEN_VARIABLE} to your operator token`,
    };
  }
  const credential = findCredential(credentialsFrom(config), token);
  if (!credential) {
    return {
      ok: false,
      identity: null,
      problem: `the token in ${from} is not one this claimwatch accepts (CLAIMWATCH_OPERATOR_TOKEN, or the data dir's operator-token when none is configured)`,
    };
  }
  const identity: Identity = { name: credential.name, role: credential.role, via: "bearer" };
  if (credential.role !== "operator") {
    return { ok: false, identity, problem: `this needs the operator role; the token in ${from} is a viewer's` };
  }
  return { ok: true, identity, from };
}
