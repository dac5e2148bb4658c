/**
 * Runs before routing. Its only job: a path whose percent-encoding does not decode (`/api/runs/%zz`)
 * is answered 400 here — Next.js would otherwise fail decoding the route parameter with a bare 500.
 * Access control is not done here: every route handler and page checks the caller itself.
 */
import { NextResponse, type NextRequest } from "next/server";

export function proxy(request: NextRequest): NextResponse {
  const raw = new URL(request.url).pathname;
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

export const config = { matcher: ["/api/:path*", "/runs/:path*"] };
