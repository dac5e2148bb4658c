/** The identity behind a page request (server components): session cookie or Bearer token. */
import { headers } from "next/headers";
import { redirect } from "next/navigation";
import { authenticateHeaders, type Identity } from "../auth/guard";
import { getWebContext } from "./context";

export async function pageIdentity(): Promise<Identity | null> {
  try {
    const { config, sessions } = getWebContext();
    return await authenticateHeaders(config, await headers(), sessions);
  } catch {
    return null;
  }
}

/** For pages: the identity, or a redirect to the login page. Each page calls it itself. */
export async function requireViewer(): Promise<Identity> {
  const identity = await pageIdentity();
  if (!identity) redirect("/login");
  return identity;
}
