/**
 * Plain wording for zod's own messages, everywhere (API bodies and queries, `claimwatch.yaml`, the
 * environment): "is required", "must be a string", "must be at least 10" instead of zod's
 * "Invalid input: expected string, received undefined". A schema's own message still wins (zod
 * reads this map last). Imported for its effect by every place that turns zod issues into a
 * message (lib/api/errors.ts, lib/config.ts, lib/rebuilds/definitions.ts).
 */
import { z } from "zod";

const withArticle = (noun: string) => `${/^[aeiou]/.test(noun) ? "an" : "a"} ${noun}`;

const TYPE_NAMES: Record<string, string> = { array: "list", int: "whole number", nan: "number" };

function received(input: unknown): string {
  if (input === null) return "null";
  if (Array.isArray(input)) return "a list";
  if (typeof input === "object") return "an object";
  return withArticle(typeof input);
}

const SIZED: Record<string, (n: string) => string> = {
  string: (n) => `${n} character${n === "1" ? "" : "s"}`,
  array: (n) => `${n} item${n === "1" ? "" : "s"}`,
  set: (n) => `${n} item${n === "1" ? "" : "s"}`,
};

function bound(
  kind: "at least" | "at most",
  strict: "greater than" | "less than",
  origin: string,
  limit: number | bigint,
  inclusive: boolean | undefined,
  exact: boolean | undefined,
): string {
  const n = String(limit);
  const sized = SIZED[origin];
  if (sized && kind === "at least" && n === "1" && !exact) return "must not be empty";
  if (sized) return exact ? `must have exactly ${sized(n)}` : `must have ${kind} ${sized(n)}`;
  return inclusive === false ? `must be ${strict} ${n}` : `must be ${kind} ${n}`;
}

/** The message for one issue, or undefined for zod's own. */
export function plainMessage(issue: z.core.$ZodRawIssue): string | undefined {
  switch (issue.code) {
    case "invalid_type": {
      if (issue.input === undefined) return "is required";
      if (issue.expected === "int" && typeof issue.input === "number") return "must be a whole number";
      const expected = TYPE_NAMES[issue.expected] ?? issue.expected;
      return `must be ${withArticle(expected)}, not ${received(issue.input)}`;
    }
    case "too_small":
      return bound("at least", "greater than", issue.origin, issue.minimum, issue.inclusive, issue.exact);
    case "too_big":
      return bound("at most", "less than", issue.origin, issue.maximum, issue.inclusive, issue.exact);
    case "invalid_value":
      return issue.values.length === 1
        ? `must be ${JSON.stringify(issue.values[0])}`
        : `must be one of ${issue.values.map((v) => JSON.stringify(v)).join(", ")}`;
    default:
      return undefined;
  }
}

z.config({ customError: (issue) => plainMessage(issue) });
