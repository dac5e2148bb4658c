/**
 * Runs before routing. Its only jobs: "/x/" is redirected to "/x" (Next's own redirect is off,
 * next.config.ts); a path whose percent-encoding does not decode
 * (`/api/runs/%zz`) is answered 400 here — Next.js would otherwise fail decoding the route
 * parameter with a bare 500; and a URL longer than any the API or the pages use is answered 414 —
 * Next.js would otherwise echo it into response headers (a redirect's Location and more) past
 * what an HTTP client accepts, and the client sees no answer at all (the fuzzer found it).
 * Pages are read with GET and HEAD only: any other method on a path outside /api/ is answered
 * 405 in the API's error shape — Next.js would otherwise take a multipart POST for a server
 * action (this app has none) and answer 409 with no JSON (the fuzzer found it, through
 * `/api/%2e%2e`, which the URL parser turns into `/`).
 * Access control is not done here: every route handler and page checks the caller itself.
 */
import { NextResponse, type NextRequest } from "next/server";

/** Longest URL (path and query) answered; the dashboard's own are a few hundred characters. */
const MAX_URL_LENGTH = 4096;

export function proxy(request: NextRequest): NextResponse {
  const url = new URL(request.url);
  const length = url.pathname.length + url.search.length;
  if (length > MAX_URL_LENGTH) {
    return NextResponse.json(
      {
        error: {
          code: "uri-too-long",
          message: `the URL is ${length} characters long; the limit is ${MAX_URL_LENGTH}`,
        },
      },
      { status: 414 },
    );
  }
  const raw = url.pathname;
  // Next's trailing-slash redirect, done here (next.config.ts skipTrailingSlashRedirect).
  if (raw.length > 1 && raw.endsWith("/")) {
    const target = new URL(request.url);
    target.pathname = raw.replace(/\/+$/, "") || "/";
    return NextResponse.redirect(target, 308);
  }
  if (!raw.startsWith("/api/") && request.method !== "GET" && request.method !== "HEAD") {
    return NextResponse.json(
      { error: { code: "method-not-allowed", message: `${request.method} ${raw}: pages are read with GET or HEAD` } },
      { status: 405, headers: { allow: "GET, HEAD", "cache-control": "no-store" } },
    );
  }
  if (!raw.startsWith("/api/") && !raw.startsWith("/runs/")) return NextResponse.next();
  try {
    for (const segment of raw.split("/")) decodeURIComponent(segment);
  } catch {
    return NextResponse.json(
      { error: { code: "bad-request", message: "path: malformed percent-encoding" } },
      { status: 400 },
    );
  }
  return NextResponse.next();
}

// Every path but Next's own static files (the length limit holds for pages too).
export const config = { matcher: ["/((?!_next/static|_next/image).*)"] };
