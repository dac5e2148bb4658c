import { authenticateHeaders } from "@/lib/auth/guard";
import { publicHealth } from "@/lib/health/health";
import { currentHealth } from "@/lib/web/health-report";
import { getWebContext } from "@/lib/web/context";

export const dynamic = "force-dynamic";

/**
 * Public (load balancers probe it): 200 when both Redis servers answer, 503 otherwise; always
 * within ~2 s. Anonymous callers get the verdict without details (no hosts, paths or keys);
 * a logged-in viewer gets the reasons the banner shows.
 */
export async function GET(request: Request): Promise<Response> {
  let identified: boolean;
  try {
    const { config, sessions } = getWebContext();
    identified = (await authenticateHeaders(config, request.headers, sessions)) !== null;
  } catch {
    identified = false;
  }
  const report = await currentHealth({ operational: identified });
  return Response.json(identified ? report : publicHealth(report), {
    status: report.ok ? 200 : 503,
    headers: { "cache-control": "no-store" },
  });
}
