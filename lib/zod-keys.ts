/**
 * "Did you mean": the keys a zod schema allows at a place, and whether an unknown key was meant as
 * one of them. One rule for `claimwatch.yaml` (lib/rebuilds/definitions.ts) and API bodies and
 * queries (lib/api/errors.ts).
 */
import type { z } from "zod";

/** Edit distance for short words, a swap of two neighbours counting as one edit (`wokr` → `work`). */
function editDistance(a: string, b: string): number {
  let before: number[] = [];
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const row = [i];
    for (let j = 1; j <= b.length; j++) {
      row[j] = Math.min(previous[j]! + 1, row[j - 1]! + 1, previous[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1])
        row[j] = Math.min(row[j]!, before[j - 2]! + 1);
    }
    before = previous;
    previous = row;
  }
  return previous[b.length]!;
}

/** Whether `word` is one slip from `known` (two for a word longer than 5): a misspelling of it. */
export const nearMiss = (word: string, known: string) => editDistance(word, known) <= (known.length > 5 ? 2 : 1);

/** A key written as `known`: a near miss, or it without (or with) a short ending (`webhookUrl` for `webhookUrlEnv`). */
export const meantAsKey = (key: string, known: string) =>
  nearMiss(key, known) ||
  (Math.min(key.length, known.length) >= 4 &&
    Math.abs(key.length - known.length) <= 3 &&
    (known.startsWith(key) || key.startsWith(known)));

/**
 * The keys a mapping at `at` may have, read from the schema (through optional, default, pipe,
 * union, record and list wrappers); none where the schema has no mapping there.
 */
export function knownKeysAt(schema: z.core.$ZodType, at: readonly PropertyKey[]): string[] {
  const def = schema._zod.def as unknown as Record<string, unknown> & { type: string };
  const inner = (def.innerType ?? def.in) as z.core.$ZodType | undefined;
  if (inner) return knownKeysAt(inner, at);
  if (def.type === "union") {
    return [...new Set((def.options as z.core.$ZodType[]).flatMap((option) => knownKeysAt(option, at)))];
  }
  if (def.type === "lazy") return knownKeysAt((def.getter as () => z.core.$ZodType)(), at);
  const shape = def.type === "object" ? (def.shape as Record<string, z.core.$ZodType>) : undefined;
  if (at.length === 0) return shape ? Object.keys(shape) : [];
  const [head, ...rest] = at;
  if (shape) {
    const child = shape[String(head)];
    return child ? knownKeysAt(child, rest) : [];
  }
  if (def.type === "record") return knownKeysAt(def.valueType as z.core.$ZodType, rest);
  if (def.type === "array") return knownKeysAt(def.element as z.core.$ZodType, rest);
  return [];
}

/** The key the schema allows at `at` that `key` was surely meant as, leaving out keys `given` has; or undefined. */
export function meantKey(
  schema: z.core.$ZodType,
  at: readonly PropertyKey[],
  key: string,
  given?: unknown,
): string | undefined {
  for (const wanted of knownKeysAt(schema, at)) {
    if (given && typeof given === "object" && wanted in given) continue;
    if (meantAsKey(key.toLowerCase(), wanted.toLowerCase())) return wanted;
  }
  return undefined;
}
