/**
 * The HTTP methods a route does not serve. Next.js answers those itself with a 405 and an empty
 * body; a route exports these instead, so they answer in the API's error shape with `Allow`:
 *
 *     export const GET = route(…);
 *     export const { POST, PUT, PATCH, DELETE, OPTIONS } = otherMethods({ GET });
 *
 * OPTIONS is among them because Next's own OPTIONS would list these 405 handlers as allowed.
 * HEAD is left to Next where the route serves GET (it answers HEAD with GET's handler).
 * Nobody is authenticated for a 405: the methods of a route are no secret (README, HTTP API).
 */

/** The methods Next.js routes (next/dist/server/web/http); any other is its own 400. */
export const HTTP_METHODS = ["GET", "HEAD", "OPTIONS", "POST", "PUT", "DELETE", "PATCH"] as const;
export type HttpMethod = (typeof HTTP_METHODS)[number];

type Served = Partial<Record<"GET" | "POST", unknown>>;
type Others<S extends Served> = Exclude<HttpMethod, keyof S | (S extends { GET: unknown } ? "HEAD" : never)>;

/** `served`: the route's handlers by method (only their names are used). */
export function otherMethods<S extends Served>(served: S): Record<Others<S>, (request: Request) => Response> {
  const names = (Object.keys(served) as HttpMethod[]).sort();
  const allow = [...names, "OPTIONS", ...(names.includes("GET") ? ["HEAD"] : [])].sort().join(", ");
  const refuse = (request: Request): Response =>
    Response.json(
      {
        error: {
          code: "method-not-allowed",
          message: `${request.method} is not allowed on ${new URL(request.url).pathname}; allowed: ${allow}`,
        },
      },
      { status: 405, headers: { allow, "cache-control": "no-store" } },
    );
  const options = (): Response => new Response(null, { status: 204, headers: { allow } });
  const handlers: Partial<Record<HttpMethod, (request: Request) => Response>> = {};
  for (const method of HTTP_METHODS) {
    if (names.includes(method) || (method === "HEAD" && names.includes("GET"))) continue;
    handlers[method] = method === "OPTIONS" ? options : refuse;
  }
  return handlers as Record<Others<S>, (request: Request) => Response>;
}
