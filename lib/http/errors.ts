/**
 * An expected refusal with an HTTP status (`{"error":{"code","message"}}`): below both lib/auth,
 * which refuses callers, and lib/api, which refuses input. Anything else becomes a 500.
 */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
    this.name = "ApiError";
  }
}

export const badRequest = (message: string) => new ApiError(400, "bad-request", message);
export const notFound = (message: string) => new ApiError(404, "not-found", message);
