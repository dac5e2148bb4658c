"use client";

/** Previous / Next for a list paged by cursors (`cursors`: the stack of pages visited, first is null). */
export function CursorPager({
  cursors,
  nextCursor,
  onChange,
}: {
  cursors: (string | null)[];
  nextCursor: string | null | undefined;
  onChange: (cursors: (string | null)[]) => void;
}) {
  return (
    <div className="flex gap-2 text-sm">
      {cursors.length > 1 ? (
        <button type="button" className="rounded border px-2 py-1" onClick={() => onChange(cursors.slice(0, -1))}>
          Previous page
        </button>
      ) : null}
      {nextCursor ? (
        <button type="button" className="rounded border px-2 py-1" onClick={() => onChange([...cursors, nextCursor])}>
          Next page
        </button>
      ) : null}
    </div>
  );
}
