/**
 * A JSON value a Redis key holds, read with its schema. `undefined` when the text is not JSON
 * or not of that shape (a foreign writer, a damaged key): each caller says what that means.
 */
import type { z } from "zod";

export function parseStoredJson<T>(schema: z.ZodType<T>, raw: string): T | undefined {
  try {
    const parsed = schema.safeParse(JSON.parse(raw));
    return parsed.success ? parsed.data : undefined;
  } catch {
    return undefined;
  }
}
