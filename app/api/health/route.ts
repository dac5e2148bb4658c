import { json } from "@/lib/api/handler";
import { healthReply } from "@/lib/api/health";
import { otherMethods } from "@/lib/api/methods";
import { authenticateHeaders } from "@/lib/auth/guard";
import { getWebContext } from "@/lib/web/context";
import { currentHealth } from "@/lib/web/health-report";

export const dynamic = "force-dynamic";

/**
 * Public (load balancers probe it): 200 when both Redis servers answer, 503 otherwise (with the
 * error shape beside the report); always within ~2 s. Anonymous callers get the verdict without
 * details (no hosts, paths or keys; how many problems, from checks at most 5 s old); a logged-in
 * viewer gets the reasons the banner shows.
 */
export async function GET(request: Request): Promise<Response> {
  let identified: boolean;
  try {
    const { config, sessions } = getWebContext();
    identified = (await authenticateHeaders(config, request.headers, sessions)) !== null;
  } catch {
    identified = false;
  }
  const reply = healthReply(await currentHealth({ anonymous: !identified }), identified);
  return json(reply.body, reply.status);
}

export const { POST, PUT, PATCH, DELETE, OPTIONS } = otherMethods({ GET });
