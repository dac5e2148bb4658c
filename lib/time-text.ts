/**
 * Absolute times as claimwatch writes them everywhere a person reads one — the dashboard, the
 * CLI, alert summaries, the banner's problems: `2026-12-01 21:15:03 UTC`, or the viewer's zone.
 * A leaf: the worker's domain modules use it for the texts they write, the UI through lib/ui/format.
 */
const pad = (n: number) => String(n).padStart(2, "0");

/** Where an absolute time is written: UTC (schedules, server messages) or the viewer's zone. */
export type TimeZoneChoice = "utc" | "local";

export function formatAbsolute(ms: number | null | undefined, zone: TimeZoneChoice = "utc"): string {
  if (ms === null || ms === undefined || !Number.isFinite(ms) || ms <= 0) return "–";
  const d = new Date(ms);
  if (zone === "utc") {
    return `${d.getUTCFullYear()}-${pad(d.getUTCMonth() + 1)}-${pad(d.getUTCDate())} ${pad(d.getUTCHours())}:${pad(d.getUTCMinutes())}:${pad(d.getUTCSeconds())} UTC`;
  }
  const offset = -d.getTimezoneOffset();
  const zoneText =
    offset === 0
      ? "UTC"
      : `UTC${offset > 0 ? "+" : "-"}${pad(Math.floor(Math.abs(offset) / 60))}:${pad(Math.abs(offset) % 60)}`;
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())} ${zoneText}`;
}
