/**
 * Logging in with a token. A failed attempt is answered slower the more failures there were in
 * the last 15 minutes (250 ms doubling, at most 5 s) and audited; the token itself is never logged.
 */
import { appendAudit } from "../audit";
import type { WebContext } from "../web/context";
import { credentialsFrom, findCredential } from "./credentials";
import { sessionSecret, signSession, SESSION_TTL_MS, type Session } from "./session";

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
