import { currentHealth } from "@/lib/health/report";

export const dynamic = "force-dynamic";

/** 200 when both Redis servers answer, 503 otherwise; always within ~2 s. */
export async function GET(): Promise<Response> {
  const report = await currentHealth();
  return Response.json(report, {
    status: report.ok ? 200 : 503,
    headers: { "cache-control": "no-store" },
  });
}
