/**
 * Plain-text output of the `claimwatch` CLI: aligned tables and the short cells in them. Pure
 * functions; durations and times as lib/ui/format writes them everywhere else.
 */
import { formatAbsolute, formatDurationMs } from "../ui/format";

/** Columns padded to their widest cell, two spaces apart; the last column is not padded. */
export function table(headers: string[], rows: string[][]): string[] {
  const widths = headers.map((header, i) => Math.max(header.length, ...rows.map((row) => (row[i] ?? "").length)));
  const line = (cells: string[]) =>
    cells
      .map((cell, i) => (i === cells.length - 1 ? cell : cell.padEnd(widths[i]!)))
      .join("  ")
      .trimEnd();
  return [line(headers), ...rows.map(line)];
}

export const duration = (ms: number | null | undefined) => formatDurationMs(ms);
export const time = (ms: number | null | undefined) => formatAbsolute(ms, "utc");
export const orDash = (value: string | number | null | undefined) =>
  value === null || value === undefined || value === "" ? "–" : String(value);
/** `parcels` or `incidents/acme`. */
export const rebuildLabel = (rebuild: string | null, tenant: string | null) =>
  rebuild ? (tenant ? `${rebuild}/${tenant}` : rebuild) : "–";
