/**
 * Route handler plumbing: one wrapper turns thrown ApiErrors and outages into
 * `{"error":{"code","message"}}` responses, so each handler stays a few lines.
 */
import { getWebContext, type WebContext } from "../web/context";
import { errorResponse } from "./errors";

export function json(data: unknown, status = 200): Response {
  return Response.json(data, { status, headers: { "cache-control": "no-store" } });
}

export function route<Args extends unknown[]>(
  handler: (context: WebContext, request: Request, ...args: Args) => Promise<Response>,
): (request: Request, ...args: Args) => Promise<Response> {
  return async (request, ...args) => {
    try {
      return await handler(getWebContext(), request, ...args);
    } catch (error) {
      return errorResponse(error);
    }
  };
}

/**
 * Who is acting, for the audit log. Until access control lands (issue 6) every caller is the
 * anonymous local operator; the audit entry says so.
 */
export function actorOf(_request: Request): string {
  return "local-operator";
}
