import { otherMethods } from "@/lib/api/methods";
import { z } from "zod";
import { json, route } from "@/lib/api/handler";
import { readJsonBody } from "@/lib/api/input";
import { logIn } from "@/lib/auth/login";
import { sessionCookie } from "@/lib/auth/session";

export const dynamic = "force-dynamic";

const loginBody = z.strictObject({ token: z.string().min(1, "must not be empty").max(300) });

/** Token → session cookie. A wrong token is answered slowly (and audited). */
export const POST = route({ role: "public" }, async (context, request) => {
  const { token } = await readJsonBody(request, loginBody);
  const result = await logIn(context, token);
  if (!result.ok) {
    await new Promise((resolve) => setTimeout(resolve, result.delayMs));
    return json({ error: { code: "unauthenticated", message: "unknown token" } }, 401);
  }
  // Behind a TLS-terminating proxy the request is plain http: the public URL says https.
  const secure =
    new URL(request.url).protocol === "https:" || context.config.publicOrigin?.startsWith("https:") === true;
  return json({ name: result.session.name, role: result.session.role }, 200, {
    "set-cookie": sessionCookie(result.cookieValue, secure),
  });
});

export const { GET, HEAD, PUT, PATCH, DELETE, OPTIONS } = otherMethods({ POST });
