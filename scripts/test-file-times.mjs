/**
 * A node:test reporter for `npm test`: at the end of the run, each test file's time (the sum of
 * its top-level tests; its hooks, such as starting a redis-server, are not in it), slowest
 * first: what bounds a step that runs files three at a time. (Arrival times of events say
 * nothing here: the runner reports files in order, each after the ones before it.)
 *
 * JavaScript, not TypeScript: node loads reporters before `--import tsx` applies. The table is
 * written at once (a synchronous write to stdout) on the run's first summary diagnostic
 * (`tests N`): with `--test-force-exit` the process ends before the stream does, and before a
 * reporter's later output is flushed.
 */
import fs from "node:fs";

/**
 * @param {AsyncIterable<{ type: string, data: { nesting?: number, file?: string, message?: string, details?: { duration_ms?: number } } }>} source
 * @returns {AsyncGenerator<string>}
 */
// eslint-disable-next-line require-yield -- the table is written synchronously (see above)
export default async function* fileTimes(source) {
  /** @type {Map<string, number>} */
  const totals = new Map();
  for await (const event of source) {
    const { nesting, file, details, message } = event.data ?? {};
    if ((event.type === "test:pass" || event.type === "test:fail") && nesting === 0 && file) {
      totals.set(file, (totals.get(file) ?? 0) + (details?.duration_ms ?? 0));
    }
    if (event.type === "test:diagnostic" && !file && nesting === 0 && /^tests \d+$/.test(String(message))) {
      fs.writeSync(1, table(totals));
      totals.clear();
    }
  }
}

/** @param {Map<string, number>} totals */
function table(totals) {
  const cwd = `${process.cwd()}/`;
  const rows = [...totals].sort((a, b) => b[1] - a[1]);
  const sum = rows.reduce((total, [, ms]) => total + ms, 0);
  const seconds = (/** @type {number} */ ms) => `${(ms / 1000).toFixed(1).padStart(7)} s`;
  const lines = ["", "time per test file (its top-level tests), slowest first:"];
  for (const [file, ms] of rows) lines.push(`${seconds(ms)}  ${file.replace(cwd, "")}`);
  lines.push(`${seconds(sum)}  in all, ${rows.length} files`, "");
  return lines.join("\n");
}
