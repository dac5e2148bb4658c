/**
 * Any path under /api that no route serves (a typo, an old client, a dot segment resolved away):
 * 404 in the API's error shape for everyone and every method, instead of Next.js's HTML page,
 * its "Server Action unavailable" answer to a POST, or its empty 405 to the other methods.
 */
import { errorResponse, notFound } from "@/lib/api/errors";

export const dynamic = "force-dynamic";

const answer = async (): Promise<Response> => errorResponse(notFound("no such API route"));

export const GET = answer;
export const POST = answer;
// The fuzzer's route table (test/launcher/fuzz-api.test.ts) fuzzes GET and POST; these answer the same.
export { answer as PUT, answer as PATCH, answer as DELETE, answer as OPTIONS };
