import { json, route } from "@/lib/api/handler";
import { logOut } from "@/lib/auth/login";
import { sessionCookie } from "@/lib/auth/session";

export const dynamic = "force-dynamic";

/**
 * Ends the session server-side (its cookie is refused from now on) and always clears the cookie
 * in this browser, even when the revocation could not be written (then `problem` says so).
 */
export const POST = route({ role: "public" }, async (context, request) => {
  const result = await logOut(context, request);
  return json({ loggedOut: true, ...result }, 200, { "set-cookie": sessionCookie("", false, 0) });
});
