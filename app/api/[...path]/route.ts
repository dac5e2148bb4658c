/**
 * Any path under /api that no route serves (a typo, an old client, a dot segment resolved away):
 * 404 in the API's error shape for everyone, instead of Next.js's HTML page or its "Server
 * Action unavailable" answer to a POST.
 */
import { errorResponse, notFound } from "@/lib/api/errors";

export const dynamic = "force-dynamic";

const answer = async (): Promise<Response> => errorResponse(notFound("no such API route"));

export const GET = answer;
export const POST = answer;
