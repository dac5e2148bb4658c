/**
 * A node:test reporter for `npm test`: after the run, each test file's time — the sum of its
 * top-level tests, set-up hooks not included — slowest first, then the sum. Files run three at
 * a time, so the slowest ones bound the step: they are listed first in scripts/test.sh.
 */
/**
 * (JavaScript: node loads reporters before `--import tsx` applies.)
 * @param {AsyncIterable<{ type: string, data: { nesting?: number, file?: string, details?: { duration_ms?: number } } }>} source
 * @returns {AsyncGenerator<string>}
 */
export default async function* fileTimes(source) {
  /** @type {Map<string, number>} */
  const totals = new Map();
  for await (const event of source) {
    if (event.type !== "test:pass" && event.type !== "test:fail") continue;
    const { nesting, file, details } = event.data;
    if (nesting !== 0 || !file) continue;
    totals.set(file, (totals.get(file) ?? 0) + (details?.duration_ms ?? 0));
  }
  const cwd = `${process.cwd()}/`;
  const rows = [...totals].sort((a, b) => b[1] - a[1]);
  const sum = rows.reduce((total, [, ms]) => total + ms, 0);
  yield "\ntime per test file (its top-level tests), slowest first:\n";
  for (const [file, ms] of rows) yield `  ${(ms / 1000).toFixed(1).padStart(7)} s  ${file.replace(cwd, "")}\n`;
  yield `  ${(sum / 1000).toFixed(1).padStart(7)} s  in all, ${rows.length} files\n`;
}
