/** Durations as operators write them in claimwatch.yaml: `500ms`, `90s`, `10m`, `2h`, `1d`, `1h30m`. */
const UNIT_MS = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 } as const;
const WHOLE = /^(?:\d+(?:ms|s|m|h|d))+$/;
const PART = /(\d+)(ms|s|m|h|d)/g;

/** Milliseconds, or undefined when `text` is not a duration. Zero is not a duration. */
export function parseDuration(text: string): number | undefined {
  const trimmed = text.trim();
  if (!WHOLE.test(trimmed)) return undefined;
  let total = 0;
  for (const [, amount, unit] of trimmed.matchAll(PART)) {
    total += Number(amount) * UNIT_MS[unit as keyof typeof UNIT_MS];
  }
  return total > 0 && Number.isSafeInteger(total) ? total : undefined;
}

export const DURATION_MESSAGE = "must be a duration like 500ms, 90s, 10m, 2h, 1d or 1h30m";

/**
 * The message for a value that is not a duration string (zod's `error` of a duration field): a
 * bare number (`killGrace: 5`) has no unit, as seconds or milliseconds would be a guess.
 */
export function notADurationMessage(issue: { input?: unknown }): string | undefined {
  if (issue.input === undefined) return undefined;
  return typeof issue.input === "number"
    ? `${DURATION_MESSAGE} (a number alone has no unit: write ${issue.input}s or ${issue.input}ms)`
    : DURATION_MESSAGE;
}

export function formatDuration(ms: number): string {
  if (ms % 86_400_000 === 0) return `${ms / 86_400_000}d`;
  if (ms % 3_600_000 === 0) return `${ms / 3_600_000}h`;
  if (ms % 60_000 === 0) return `${ms / 60_000}m`;
  if (ms % 1_000 === 0) return `${ms / 1_000}s`;
  return `${ms}ms`;
}
