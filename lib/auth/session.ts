/**
 * Sessions: a signed cookie `{name, role, tokenId, sid, expires}` + HMAC-SHA256 with a secret
 * kept in the data dir (0600). httpOnly, SameSite=Strict; a session ends at its expiry, when its
 * token is removed from the configuration, or at logout — server-side: the session id is
 * recorded as revoked in Redis until the cookie would have expired, so a copy of the cookie
 * stops working too.
 */
import crypto from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import type { Redis } from "ioredis";
import type { RedisKeys } from "../redis/keys";
import type { Credential, Role } from "./credentials";

export const SESSION_COOKIE = "cw_session";
export const SESSION_TTL_MS = 12 * 3_600_000;

export interface Session {
  name: string;
  role: Role;
  tokenId: string;
  /** Random id of this login; what logout revokes. */
  sid: string;
  expires: number;
}

const SID_PATTERN = /^[A-Za-z0-9_-]{22,64}$/;

export function newSessionId(): string {
  return crypto.randomBytes(16).toString("base64url");
}

const secrets = new Map<string, Buffer>();

export function sessionSecret(dataDir: string): Buffer {
  const cached = secrets.get(dataDir);
  if (cached) return cached;
  const file = path.join(dataDir, "session-secret");
  let secret: Buffer;
  try {
    secret = Buffer.from(fs.readFileSync(file, "utf8").trim(), "base64url");
    if (secret.length < 32) throw new Error("short secret");
  } catch {
    fs.mkdirSync(dataDir, { recursive: true, mode: 0o700 });
    secret = crypto.randomBytes(32);
    try {
      fs.writeFileSync(file, secret.toString("base64url"), { mode: 0o600, flag: "wx" });
    } catch {
      secret = Buffer.from(fs.readFileSync(file, "utf8").trim(), "base64url"); // another process won
    }
  }
  secrets.set(dataDir, secret);
  return secret;
}

const mac = (secret: Buffer, payload: string) => crypto.createHmac("sha256", secret).update(payload).digest();

export function signSession(session: Session, secret: Buffer): string {
  const payload = Buffer.from(JSON.stringify(session)).toString("base64url");
  return `${payload}.${mac(secret, payload).toString("base64url")}`;
}

export function verifySession(
  value: string | undefined,
  secret: Buffer,
  credentials: readonly Credential[],
  now = Date.now(),
): Session | null {
  if (!value || value.length > 2_000) return null;
  const dot = value.indexOf(".");
  if (dot < 1) return null;
  const payload = value.slice(0, dot);
  // Compared as the exact base64url text: decoding first would also accept the other spellings
  // of the same bytes (the last character's unused low bits), so one cookie had several forms.
  const signature = Buffer.from(value.slice(dot + 1));
  const expected = Buffer.from(mac(secret, payload).toString("base64url"));
  if (signature.length !== expected.length || !crypto.timingSafeEqual(signature, expected)) return null;
  let session: Session;
  try {
    session = JSON.parse(Buffer.from(payload, "base64url").toString("utf8")) as Session;
  } catch {
    return null;
  }
  if (typeof session.expires !== "number" || session.expires <= now) return null;
  // Cookies from before server-side logout carry no session id: they cannot be revoked, so refused.
  if (typeof session.sid !== "string" || !SID_PATTERN.test(session.sid)) return null;
  const credential = credentials.find((c) => c.tokenId === session.tokenId && c.role === session.role);
  return credential ? { ...session, name: credential.name } : null;
}

export function sessionCookie(value: string, secure: boolean, maxAgeMs = SESSION_TTL_MS): string {
  return [
    `${SESSION_COOKIE}=${value}`,
    "Path=/",
    "HttpOnly",
    "SameSite=Strict",
    `Max-Age=${Math.floor(maxAgeMs / 1000)}`,
    ...(secure ? ["Secure"] : []),
  ].join("; ");
}

export function readCookie(header: string | null, name: string): string | undefined {
  if (!header) return undefined;
  for (const part of header.split(";")) {
    const eq = part.indexOf("=");
    if (eq > 0 && part.slice(0, eq).trim() === name) return part.slice(eq + 1).trim();
  }
  return undefined;
}

/** Asks whether a session id was logged out (server-side revocation). */
export interface SessionRevocations {
  isRevoked(sid: string): Promise<boolean>;
}

/**
 * A revocation check that takes longer than this counts as failed (callers decide what that
 * means). EXISTS answers in well under a millisecond; the margin is for a loaded event loop, where
 * a timer that fires first would let a logged-out cookie through. Anonymous health probes (load
 * balancers) carry no cookie and never wait on it.
 */
export const REVOCATION_CHECK_MS = 1_000;

/**
 * Revocations in Redis. Each check is bounded (REVOCATION_CHECK_MS), so a stalled Redis cannot
 * hold up a page or the health route's ~2 s answer.
 */
export function sessionRevocations(client: Pick<Redis, "exists">, keys: RedisKeys): SessionRevocations {
  return {
    isRevoked: async (sid) => {
      let timer: NodeJS.Timeout | undefined;
      const late = new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error("revocation check timed out")), REVOCATION_CHECK_MS);
      });
      try {
        return (await Promise.race([client.exists(keys.revokedSession(sid)), late])) === 1;
      } finally {
        clearTimeout(timer);
      }
    },
  };
}

/** Logout: the session id is refused until the cookie would have expired anyway. */
export async function revokeSession(
  client: Pick<Redis, "set">,
  keys: RedisKeys,
  session: Session,
  now = Date.now(),
): Promise<void> {
  await client.set(keys.revokedSession(session.sid), String(now), "PX", Math.max(1, session.expires - now));
}
