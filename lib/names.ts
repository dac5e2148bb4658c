/**
 * The one rule for rebuild and tenant names (definitions file, API input, run indexes): letters,
 * digits, `_` and `-`, starting with a letter or digit, at most 64 characters. Safe inside a
 * Redis key and a URL path segment.
 */
export const NAME_PATTERN = /^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$/;

export function isName(value: unknown): value is string {
  return typeof value === "string" && NAME_PATTERN.test(value);
}
