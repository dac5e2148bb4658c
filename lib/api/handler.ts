/**
 * Route handler plumbing. Every handler declares who may call it; the wrapper checks that itself
 * (no middleware is trusted to have done it), applies the CSRF and rate-limit rules to mutations,
 * audits refused mutations, and turns thrown errors into `{"error":{"code","message"}}`.
 */
import { appendAudit, failureWasAudited, type AuditAction } from "../audit";
import { AccessDenied, authorize, type Identity, type Requirement } from "../auth/guard";
import { takeToken } from "../auth/rate-limit";
import { getWebContext, type WebContext } from "../web/context";
import { ApiError, errorResponse, publicErrorOf } from "./errors";

export function json(data: unknown, status = 200, headers: Record<string, string> = {}): Response {
  return Response.json(data, { status, headers: { "cache-control": "no-store", ...headers } });
}

export interface RouteRules {
  /** Who may call: "public", "viewer" (reads) or "operator" (also mutates). */
  role: Requirement;
  /**
   * A mutation: CSRF-checked for cookie sessions, rate limited per identity and action, audited
   * when refused. A function when the action depends on the body (it reads a copy of the request).
   */
  mutation?: AuditAction | ((request: Request) => Promise<AuditAction>);
}

/** The caller as the audit log names them. */
export function actorOf(identity: Identity | null): string {
  return identity ? `${identity.name} (${identity.role})` : "anonymous";
}

export function route<Args extends unknown[]>(
  rules: RouteRules,
  handler: (context: WebContext, request: Request, identity: Identity | null, ...args: Args) => Promise<Response>,
): (request: Request, ...args: Args) => Promise<Response> {
  return async (request, ...args) => {
    let context: WebContext | undefined;
    let identity: Identity | null = null;
    /** The handler ran (past the checks and the rate limit): a failure then may have changed something. */
    let handlerStarted = false;
    let action = typeof rules.mutation === "function" ? undefined : rules.mutation;
    try {
      context = getWebContext();
      // Times this request writes or compares with other processes' (BullMQ's among them) are on the Redis clock.
      await context.clockReady();
      // From a copy: the handler reads the body itself.
      if (typeof rules.mutation === "function") action = await rules.mutation(request.clone());
      identity = await authorize(context.config, request, rules.role, Boolean(rules.mutation), context.sessions);
      if (action && identity) {
        const limit = await takeToken(context.connections.main, context.connections.keys, action, identity.name);
        if (!limit.allowed) {
          const seconds = Math.ceil(limit.retryAfterMs / 1000);
          await auditRefusal(context, action, identity, request, `rate limited (retry in ${seconds} s)`);
          return Response.json(
            { error: { code: "rate-limited", message: `too many ${action} requests; retry in ${seconds} s` } },
            { status: 429, headers: { "retry-after": String(seconds) } },
          );
        }
      }
      handlerStarted = true;
      return await handler(context, request, identity, ...args);
    } catch (error) {
      if (action && context && error instanceof ApiError && error.status < 500) {
        const who = error instanceof AccessDenied ? error.identity : identity;
        await auditRefusal(context, action, who, request, `${error.status} ${error.code}: ${error.message}`).catch(
          () => {},
        );
        return errorResponse(error);
      }
      const { status, code, message } = publicErrorOf(error);
      // An allowed mutation that ended in an error may have changed part of what it was asked
      // (a schedule's pause dropped, its scheduler not upserted): the audit log says it was tried.
      // Not with Redis unreachable (503: the entry could not be written either, and would hold the
      // answer up), and not twice (force release audits its own failures).
      if (action && context && identity && handlerStarted && status !== 503 && !failureWasAudited(error)) {
        await appendAudit(context.connections.main, context.connections.keys, {
          actor: actorOf(identity),
          action,
          reason: `${status} ${code}: ${message}`,
          result: "failed",
          detail: { path: new URL(request.url).pathname, method: request.method },
        }).catch(() => {});
      }
      return Response.json({ error: { code, message } }, { status });
    }
  };
}

/** Refused mutations of one actor in a window that are audited one by one; then one in a hundred, with the count. */
const REFUSALS_AUDITED_EACH = 100;
const REFUSALS_WINDOW_MS = 15 * 60_000;
/** The longest request path an audit entry keeps (a caller chooses it). */
const AUDITED_PATH_MAX = 256;

/**
 * A refused API mutation, audited. Refusals cost a caller nothing — no login, no rate limit
 * before the identity is known — so a flood of them (helper-137: 2 000 anonymous requests with
 * 4 KB paths, 5 KB an entry) must not push real entries out of the log nor fill the Redis the
 * queue shares: each actor's first REFUSALS_AUDITED_EACH in a 15-minute window are audited one by
 * one, then one entry per hundred, with the count (as failed logins are); the path is cut.
 */
async function auditRefusal(
  context: WebContext,
  action: AuditAction,
  identity: Identity | null,
  request: Request,
  reason: string,
): Promise<void> {
  const actor = actorOf(identity);
  const { main, keys } = context.connections;
  const key = keys.refusals(actor);
  const replies = (await main.multi().incr(key).pexpire(key, REFUSALS_WINDOW_MS, "NX").exec()) ?? [];
  const refusals = Number(replies[0]?.[1] ?? 1);
  if (refusals > REFUSALS_AUDITED_EACH && refusals % REFUSALS_AUDITED_EACH !== 0) return;
  const path = new URL(request.url).pathname;
  const cut = reason.length > AUDITED_PATH_MAX * 2 ? `${reason.slice(0, AUDITED_PATH_MAX * 2)}…` : reason;
  await auditRefused(context, action, actor, cut, {
    path: path.length > AUDITED_PATH_MAX ? `${path.slice(0, AUDITED_PATH_MAX)}… (${path.length} characters)` : path,
    method: request.method,
    ...(refusals > REFUSALS_AUDITED_EACH ? { refusalsInWindow: refusals } : {}),
  });
}

/** A mutation refused before it ran (who, why), as the audit log keeps it: the API's and the CLI's. */
export async function auditRefused(
  context: Pick<WebContext, "connections">,
  action: AuditAction,
  actor: string,
  reason: string,
  detail: Record<string, unknown>,
): Promise<void> {
  await appendAudit(context.connections.main, context.connections.keys, {
    actor,
    action,
    reason,
    result: "refused",
    detail,
  });
}
