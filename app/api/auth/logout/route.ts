import { json, route } from "@/lib/api/handler";
import { logOut } from "@/lib/auth/login";
import { sessionCookie } from "@/lib/auth/session";

export const dynamic = "force-dynamic";

/** Ends the session server-side (its cookie is refused from now on) and clears the cookie. */
export const POST = route({ role: "public" }, async (context, request) => {
  const { revoked } = await logOut(context, request);
  return json({ loggedOut: true, revoked }, 200, { "set-cookie": sessionCookie("", false, 0) });
});
