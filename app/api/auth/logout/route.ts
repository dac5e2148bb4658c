import { json, route } from "@/lib/api/handler";
import { sessionCookie } from "@/lib/auth/session";

export const dynamic = "force-dynamic";

export const POST = route({ role: "public" }, async () =>
  json({ loggedOut: true }, 200, { "set-cookie": sessionCookie("", false, 0) }),
);
