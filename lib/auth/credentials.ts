/**
 * Who may use the dashboard: operator and viewer tokens from the environment, or — when none is
 * configured — one operator token that the first `npm start` generates into the data dir (mode
 * 0600). Tokens are compared in constant time and never logged or sent back.
 */
import crypto from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import type { Config } from "../config";

export type Role = "viewer" | "operator";

export interface Credential {
  name: string;
  role: Role;
  /** A short, non-reversible id of the token (sessions refer to it, so a removed token ends them). */
  tokenId: string;
  digest: Buffer;
}

export function operatorTokenPath(dataDir: string): string {
  return path.join(dataDir, "operator-token");
}

const digestOf = (token: string) => crypto.createHash("sha256").update(token).digest();

/** Reads the generated operator token, creating it (0600) if missing. */
export function ensureGeneratedOperatorToken(dataDir: string): { token: string; created: boolean } {
  const file = operatorTokenPath(dataDir);
  try {
    return { token: fs.readFileSync(file, "utf8").trim(), created: false };
  } catch {
    fs.mkdirSync(dataDir, { recursive: true, mode: 0o700 });
    const token = crypto.randomBytes(24).toString("base64url");
    fs.writeFileSync(file, `${token}\n`, { mode: 0o600, flag: "wx" });
    return { token, created: true };
  }
}

let cached: { config: Config; tokenFileMtime: number | null; credentials: Credential[] } | undefined;

function tokenFileMtime(dataDir: string): number | null {
  try {
    return fs.statSync(operatorTokenPath(dataDir)).mtimeMs;
  } catch {
    return null;
  }
}

/**
 * The credentials in force. Every request asks, so the result is cached: configured tokens
 * never change while the process runs; the generated token file is re-read only when it changes.
 */
export function credentialsFrom(config: Config): Credential[] {
  const configured = config.operatorTokens.length + config.viewerTokens.length > 0;
  const mtime = configured ? null : tokenFileMtime(config.dataDir);
  if (cached && cached.config === config && cached.tokenFileMtime === mtime) return cached.credentials;
  cached = { config, tokenFileMtime: mtime, credentials: loadCredentials(config) };
  return cached.credentials;
}

function loadCredentials(config: Config): Credential[] {
  const make = (name: string, role: Role, token: string): Credential => {
    const digest = digestOf(token);
    return { name, role, digest, tokenId: digest.subarray(0, 8).toString("hex") };
  };
  const configured = [
    ...config.operatorTokens.map((t) => make(t.name, "operator", t.token)),
    ...config.viewerTokens.map((t) => make(t.name, "viewer", t.token)),
  ];
  if (configured.length > 0) return configured;
  try {
    const token = fs.readFileSync(operatorTokenPath(config.dataDir), "utf8").trim();
    return token ? [make("operator", "operator", token)] : [];
  } catch {
    return [];
  }
}

/** The credential a presented token belongs to; every candidate is compared, in constant time. */
export function findCredential(credentials: readonly Credential[], presented: string): Credential | undefined {
  const digest = digestOf(presented);
  let found: Credential | undefined;
  for (const credential of credentials) {
    if (crypto.timingSafeEqual(credential.digest, digest)) found ??= credential;
  }
  return found;
}
