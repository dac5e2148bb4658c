/**
 * The benchmarks' settings from the environment (`BENCH_*`). A bad value stops the benchmark
 * before it starts anything, with one line naming the variable and what it must be, exit 2 —
 * not a run that prints NaN figures.
 */

function badSetting(name: string, must: string, raw: string): never {
  process.stderr.write(`bench: ${name} must be ${must} (got ${JSON.stringify(raw)})\n`);
  process.exit(2);
}

/** A number ≥ `min` (`integer`: whole); `fallback` when unset or empty. */
export function numberFromEnv(
  name: string,
  fallback: number,
  { min = 0, integer = true }: { min?: number; integer?: boolean } = {},
): number {
  const raw = process.env[name];
  if (raw === undefined || raw.trim() === "") return fallback;
  const value = Number(raw);
  if (!Number.isFinite(value) || value < min || (integer && !Number.isInteger(value))) {
    badSetting(name, `${integer ? "a whole number" : "a number"} ≥ ${min}`, raw);
  }
  return value;
}

/** A comma-separated subset of `allowed`; every one when unset or empty. */
export function listFromEnv<T extends string>(name: string, allowed: readonly T[]): T[] {
  const raw = process.env[name] ?? "";
  const items = raw
    .split(",")
    .map((item) => item.trim())
    .filter(Boolean);
  const unknown = items.filter((item) => !(allowed as readonly string[]).includes(item));
  if (unknown.length > 0) badSetting(name, `a comma-separated list of ${allowed.join(", ")}`, raw);
  return items as T[];
}
