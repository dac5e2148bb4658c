import { metricsResponse } from "@/lib/api/metrics";

export const dynamic = "force-dynamic";

/** Prometheus scrape endpoint (see lib/api/metrics for who may read it). */
export const GET = (request: Request) => metricsResponse(request);
