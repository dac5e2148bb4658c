/** Durations as operators write them in claimwatch.yaml: `500ms`, `90s`, `10m`, `2h`, `1d`, `1h30m`. */
import { z } from "zod";

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

const MAX_TIMER_MS = 2_147_483_647;
/** A duration; `tooLong`: what one past what a number holds exactly is told (the field's real limit). */
const durationUpTo = (tooLong: string) =>
  z
    .string({ error: notADurationMessage })
    .regex(WHOLE, DURATION_MESSAGE)
    .transform((text, ctx) => {
      const ms = parseDuration(text);
      if (ms !== undefined) return ms;
      // Written as a duration, but zero or past what a number holds exactly.
      const message = /[1-9]/.test(text) ? tooLong : "must be longer than 0 (e.g. 1s)";
      ctx.addIssue({ code: "custom", message });
      return z.NEVER;
    });
/** A duration field of claimwatch.yaml, in ms. */
export const durationSchema = durationUpTo("is too long (at most 9007199254740991ms)");

/** Durations that drive a timer: Node timers overflow above 2^31-1 ms (~24.8 days) and fire at once. */
const TIMER_TOO_LONG = "must be at most 24d (a timer limit)";
/** A duration field of claimwatch.yaml that drives a timer, in ms. */
export const timerDurationSchema = durationUpTo(TIMER_TOO_LONG).refine((ms) => ms <= MAX_TIMER_MS, {
  message: TIMER_TOO_LONG,
});

export function formatDuration(ms: number): string {
  if (ms % 86_400_000 === 0) return `${ms / 86_400_000}d`;
  if (ms % 3_600_000 === 0) return `${ms / 3_600_000}h`;
  if (ms % 60_000 === 0) return `${ms / 60_000}m`;
  if (ms % 1_000 === 0) return `${ms / 1_000}s`;
  return `${ms}ms`;
}
