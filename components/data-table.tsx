import type { ReactNode } from "react";

/** A header cell: its visible label, or `{ hidden }` for a column named for screen readers only. */
export type Column = string | { hidden: string };

/**
 * The dashboard's table: a bordered box that scrolls sideways on narrow screens, one header row,
 * the rows the caller renders, and an optional `footer` inside the box (e.g. "No runs match").
 */
export function DataTable({
  label,
  columns,
  children,
  footer,
}: {
  label: string;
  columns: readonly Column[];
  children: ReactNode;
  footer?: ReactNode;
}) {
  // A last column named "Actions" stays pinned on narrow screens (globals.css: .actions-pinned).
  const last = columns[columns.length - 1];
  const pinned = typeof last === "object" && last.hidden === "Actions";
  return (
    // `relative`: a column named for screen readers only (sr-only: absolutely positioned) stays
    // inside this scrolling box; without it the page itself scrolled sideways (/alerts at 390 px).
    <div
      className={`relative overflow-x-auto rounded border border-slate-200 bg-white ${pinned ? "actions-pinned" : ""}`}
    >
      <table className="min-w-full text-left text-sm" aria-label={label}>
        <thead className="bg-slate-100 text-xs uppercase text-slate-600">
          <tr>
            {columns.map((column) =>
              typeof column === "string" ? (
                <th key={column} className="px-3 py-2">
                  {column}
                </th>
              ) : (
                <th key={column.hidden} className="px-3 py-2">
                  <span className="sr-only">{column.hidden}</span>
                </th>
              ),
            )}
          </tr>
        </thead>
        <tbody>{children}</tbody>
      </table>
      {footer}
    </div>
  );
}
