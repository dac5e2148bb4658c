/**
 * Request parsing for route handlers: size-capped JSON bodies and query strings, validated with
 * zod. Every failure is a 400 naming the field (a body over MAX_BODY_BYTES: 413); unknown fields are
 * refused.
 */
import { z, type ZodType } from "zod";
import { ApiError, badRequest, describeZodError } from "./errors";

export const MAX_BODY_BYTES = 16 * 1024;

export async function readJsonBody<T>(request: Request, schema: ZodType<T>): Promise<T> {
  const declared = Number(request.headers.get("content-length") ?? "0");
  if (declared > MAX_BODY_BYTES) throw new ApiError(413, "too-large", `body: larger than ${MAX_BODY_BYTES} bytes`);
  const text = await readCapped(request);
  let raw: unknown;
  if (text.trim() === "") raw = {};
  else {
    try {
      raw = JSON.parse(text);
    } catch {
      throw badRequest("body: malformed JSON");
    }
  }
  // No body of ours nests deeper than a few levels; a hostile one thousands deep overflowed the
  // stack inside zod (a 500 found by fuzz-api, FUZZ_SEED=2449268262).
  if (nestingDepth(raw) > MAX_BODY_DEPTH) throw badRequest(`body: nested deeper than ${MAX_BODY_DEPTH} levels`);
  const parsed = schema.safeParse(raw);
  if (!parsed.success) throw badRequest(describeZodError(parsed.error, { schema, input: raw }));
  return parsed.data;
}

/** How deep a request body may nest objects and arrays. */
export const MAX_BODY_DEPTH = 16;

/** Depth of nested arrays and objects in a parsed JSON value, without recursion; stops past the limit. */
export function nestingDepth(value: unknown): number {
  let deepest = 0;
  const stack: [unknown, number][] = [[value, 0]];
  while (stack.length > 0) {
    const [item, depth] = stack.pop()!;
    if (item === null || typeof item !== "object") continue;
    deepest = Math.max(deepest, depth + 1);
    if (deepest > MAX_BODY_DEPTH) return deepest;
    for (const child of Object.values(item)) stack.push([child, depth + 1]);
  }
  return deepest;
}

/**
 * The body parsed as JSON, or `null` when it is empty, too large or malformed: for a route whose
 * rules depend on it (read from a copy of the request). Never throws.
 */
export async function peekJsonBody(request: Request): Promise<unknown> {
  try {
    const text = await readCapped(request);
    return text.trim() === "" ? null : (JSON.parse(text) as unknown);
  } catch {
    return null;
  }
}

async function readCapped(request: Request): Promise<string> {
  if (!request.body) return "";
  const reader = request.body.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    // A client that goes away mid-body (aborted upload, a Content-Length it did not keep) is its
    // failure, not the server's: a 400, audited as refused (black-box helper-147: "500 internal").
    const { done, value } = await reader.read().catch(() => {
      throw badRequest("body: the request ended before its body was read (the client closed the connection)");
    });
    if (done) break;
    size += value.byteLength;
    if (size > MAX_BODY_BYTES) {
      // Not awaited: on a copy of the request (`request.clone()`, a tee), a cancel resolves only
      // once the other copy is cancelled too — the fuzzer's 20 kB body got no answer.
      void reader.cancel().catch(() => {});
      throw new ApiError(413, "too-large", `body: larger than ${MAX_BODY_BYTES} bytes`);
    }
    chunks.push(value);
  }
  return Buffer.concat(chunks).toString("utf8");
}

export function readQuery<T>(url: string | URL, schema: ZodType<T>): T {
  const params = new URL(url).searchParams;
  const raw: Record<string, string> = {};
  for (const [key, value] of params) {
    if (key in raw) throw badRequest(`${key}: given more than once`);
    raw[key] = value;
  }
  const parsed = schema.safeParse(raw);
  if (!parsed.success) throw badRequest(describeZodError(parsed.error, { schema, input: raw }));
  return parsed.data;
}

/** `limit` in a query string: a whole number from 1 to `max`, `fallback` when absent. */
export const limitParam = (max: number, fallback: number) =>
  z
    .string()
    .regex(/^\d{1,6}$/, `must be a whole number from 1 to ${max}`)
    .transform(Number)
    .refine((n) => n >= 1 && n <= max, `must be a whole number from 1 to ${max}`)
    .default(fallback);

/** Longest reason (force release, cancel, retry, schedule change, trigger, test notification). */
export const MAX_REASON_LENGTH = 500;

/**
 * An operator's reason, for the audit log and whoever reads it there (the dashboard, `claimwatch
 * audit`, a notification): trimmed, at most 500 characters, on one line without control
 * characters (a line break could pass for another entry in a text listing). `minimum`: the
 * characters a required reason needs.
 */
export const reasonText = (minimum = 0) => {
  const text = z.string().trim();
  return (
    (minimum > 0 ? text.min(minimum, `must say why (at least ${minimum} characters)`) : text)
      .max(MAX_REASON_LENGTH, `must be at most ${MAX_REASON_LENGTH} characters`)
      // eslint-disable-next-line no-control-regex
      .regex(/^[^\x00-\x1f\x7f]*$/, "must be one line without control characters")
  );
};

/** Longest search text (`q`) a list accepts. */
export const MAX_SEARCH_LENGTH = 100;

/**
 * `q` in a query string: a name search, 1-100 characters, no control characters (it becomes a
 * Redis range bound or an in-memory match; an empty box sends no `q`).
 */
export const searchParam = () =>
  z
    .string()
    .min(1, "must not be empty (leave it out to list everything)")
    .max(MAX_SEARCH_LENGTH, `must be at most ${MAX_SEARCH_LENGTH} characters`)
    // eslint-disable-next-line no-control-regex
    .regex(/^[^\x00-\x1f\x7f]*$/, "must not contain control characters")
    .optional();
