/**
 * The check every route handler and page makes itself: who is calling (Bearer token or session
 * cookie), may they do this (viewer reads, operator also mutates), and — for a mutation carried
 * by a cookie — does it come from this origin (CSRF).
 */
import { ApiError } from "../http/errors";
import { credentialsFrom, findCredential, type Credential, type Role } from "./credentials";
import { readCookie, SESSION_COOKIE, sessionSecret, verifySession, type SessionRevocations } from "./session";
import type { Config } from "../config";

export interface Identity {
  name: string;
  role: Role;
  via: "bearer" | "cookie";
}

export type Requirement = "public" | Role;

const RANK: Record<Role, number> = { viewer: 1, operator: 2 };

/** Who is calling: a Bearer token, or a session cookie that was not logged out. */
export async function authenticateHeaders(
  config: Config,
  headers: Headers,
  revocations: SessionRevocations,
  credentials: readonly Credential[] = credentialsFrom(config),
): Promise<Identity | null> {
  const authorization = headers.get("authorization");
  if (authorization) {
    const match = /^Bearer\s+(\S+)$/i.exec(authorization);
    const credential = match ? findCredential(credentials, match[1]!) : undefined;
    return credential ? { name: credential.name, role: credential.role, via: "bearer" } : null;
  }
  const session = verifySession(
    readCookie(headers.get("cookie"), SESSION_COOKIE),
    sessionSecret(config.dataDir),
    credentials,
  );
  if (!session) return null;
  let revoked = false;
  try {
    revoked = await revocations.isRevoked(session.sid);
  } catch {
    // Redis cannot be asked: the valid signature stands, so pages and the health banner still
    // show an outage to who was logged in. Nothing can be changed without Redis anyway.
  }
  return revoked ? null : { name: session.name, role: session.role, via: "cookie" };
}

/**
 * Same-origin check for cookie-carried mutations: Origin must name the Host the request was sent
 * to, or the configured public origin (a proxy may rewrite Host); without Origin, Sec-Fetch-Site
 * must say same-origin.
 */
export function isSameOrigin(request: Request, publicOrigin?: string): boolean {
  const origin = request.headers.get("origin");
  const host = request.headers.get("host");
  if (origin) {
    try {
      const url = new URL(origin);
      return url.host === host || url.origin === publicOrigin;
    } catch {
      return false;
    }
  }
  return request.headers.get("sec-fetch-site") === "same-origin";
}

export class AccessDenied extends ApiError {
  constructor(
    status: 401 | 403,
    code: string,
    message: string,
    readonly identity: Identity | null,
  ) {
    super(status, code, message);
  }
}

export async function authorize(
  config: Config,
  request: Request,
  requirement: Requirement,
  mutation: boolean,
  revocations: SessionRevocations,
): Promise<Identity | null> {
  if (requirement === "public") return null;
  const identity = await authenticateHeaders(config, request.headers, revocations);
  if (!identity) {
    throw new AccessDenied(401, "unauthenticated", "log in, or send Authorization: Bearer <token>", null);
  }
  if (RANK[identity.role] < RANK[requirement]) {
    throw new AccessDenied(
      403,
      "forbidden",
      `this needs the ${requirement} role; you are a ${identity.role}`,
      identity,
    );
  }
  if (mutation && identity.via === "cookie" && !isSameOrigin(request, config.publicOrigin)) {
    throw new AccessDenied(403, "cross-origin", "cross-origin request refused", identity);
  }
  return identity;
}
