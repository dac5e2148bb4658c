import { json, route } from "@/lib/api/handler";
import { otherMethods } from "@/lib/api/methods";
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

export const { GET, HEAD, PUT, PATCH, DELETE, OPTIONS } = otherMethods({ POST });
