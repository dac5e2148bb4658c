/**
 * A node:test reporter for `npm test`: at the end of the run, each test file's time, slowest
 * first — from its first event to its last as they reached the runner (set-up and hooks
 * included), and the sum of its top-level tests. Files run three at a time, so the slowest
 * ones bound the step.
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
  /** @type {Map<string, { first: number, last: number, tests: number }>} */
  const files = new Map();
  for await (const event of source) {
    const { nesting, file, details, message } = event.data ?? {};
    if (file) {
      const now = Date.now();
      const seen = files.get(file) ?? { first: now, last: now, tests: 0 };
      seen.last = now;
      if ((event.type === "test:pass" || event.type === "test:fail") && nesting === 0) {
        seen.tests += details?.duration_ms ?? 0;
      }
      files.set(file, seen);
    }
    if (event.type === "test:diagnostic" && !file && nesting === 0 && /^tests \d+$/.test(String(message))) {
      fs.writeSync(1, table(files));
      files.clear();
    }
  }
}

/** @param {Map<string, { first: number, last: number, tests: number }>} files */
function table(files) {
  const cwd = `${process.cwd()}/`;
  const seconds = (/** @type {number} */ ms) => `${(ms / 1000).toFixed(1).padStart(7)} s`;
  const rows = [...files].sort((a, b) => b[1].last - b[1].first - (a[1].last - a[1].first));
  const lines = ["", "time per test file, slowest first (first to last event; its top-level tests):"];
  for (const [file, { first, last, tests }] of rows) {
    lines.push(`${seconds(last - first)} ${seconds(tests)}  ${file.replace(cwd, "")}`);
  }
  return `${lines.join("\n")}\n`;
}
