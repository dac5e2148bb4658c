/**
 * Logging in with a token. A failed attempt is answered slower the more failures there were in
 * the last 15 minutes (250 ms doubling, at most 5 s) and audited; the token itself is never logged.
 */
import { appendAudit } from "../audit";
import type { WebContext } from "../web/context";
import { credentialsFrom, findCredential } from "./credentials";
import {
  newSessionId,
  readCookie,
  revokeSession,
  SESSION_COOKIE,
  sessionSecret,
  signSession,
  SESSION_TTL_MS,
  verifySession,
  type Session,
} from "./session";

const FAILURE_WINDOW_MS = 15 * 60_000;
/** Failed logins in a window that are audited one by one. */
const AUDIT_EACH_UP_TO = 100;

export function failureDelayMs(failures: number): number {
  return Math.min(5_000, 250 * 2 ** Math.max(0, failures - 1));
}

export async function logIn(
  context: WebContext,
  token: string,
): Promise<{ ok: true; cookieValue: string; session: Session } | { ok: false; delayMs: number }> {
  const { connections, config } = context;
  const credential = findCredential(credentialsFrom(config), token);
  if (!credential) {
    const key = connections.keys.loginFailures;
    const replies = (await connections.main.multi().incr(key).pexpire(key, FAILURE_WINDOW_MS).exec()) ?? [];
    const failures = Number(replies[0]?.[1] ?? 1);
    // Under a flood, audit one entry per hundred failures (with the count) rather than each.
    if (failures > AUDIT_EACH_UP_TO && failures % AUDIT_EACH_UP_TO !== 0)
      return { ok: false, delayMs: failureDelayMs(failures) };
    await appendAudit(connections.main, connections.keys, {
      actor: "anonymous",
      action: "login",
      reason: "unknown token",
      result: "refused",
      detail: { failuresInWindow: failures },
    });
    return { ok: false, delayMs: failureDelayMs(failures) };
  }
  const session: Session = {
    name: credential.name,
    role: credential.role,
    tokenId: credential.tokenId,
    sid: newSessionId(),
    expires: Date.now() + SESSION_TTL_MS,
  };
  await appendAudit(connections.main, connections.keys, {
    actor: `${credential.name} (${credential.role})`,
    action: "login",
    reason: "token accepted",
    result: "done",
    detail: {},
  });
  return { ok: true, cookieValue: signSession(session, sessionSecret(config.dataDir)), session };
}

/**
 * Logout: the request's session (if it carries a valid one) is revoked server-side, so the
 * cookie stops working everywhere, not only in this browser. The caller clears the cookie
 * whatever happens here; a revocation that could not be written is reported, not thrown.
 */
export async function logOut(context: WebContext, request: Request): Promise<{ revoked: boolean; problem?: string }> {
  const { connections, config } = context;
  const session = verifySession(
    readCookie(request.headers.get("cookie"), SESSION_COOKIE),
    sessionSecret(config.dataDir),
    credentialsFrom(config),
  );
  if (!session) return { revoked: false };
  try {
    await revokeSession(connections.main, connections.keys, session);
  } catch (error) {
    return {
      revoked: false,
      problem: `the session could not be revoked on the server (${(error as Error).message}): copies of its cookie stay valid until it expires`,
    };
  }
  // The revocation stands; the audit entry is best effort.
  await appendAudit(connections.main, connections.keys, {
    actor: `${session.name} (${session.role})`,
    action: "logout",
    reason: "session revoked",
    result: "done",
    detail: {},
  }).catch(() => {});
  return { revoked: true };
}
