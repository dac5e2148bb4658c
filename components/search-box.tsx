"use client";

import { useEffect, useRef, useState } from "react";

/** How long typing must pause before the list is asked (one request per pause, not per key). */
export const SEARCH_DEBOUNCE_MS = 250;

/**
 * A search field for a list: reports the trimmed text once typing pauses, and keeps it in the
 * page's URL (`?q=`, replaced in place: no history entry per key, no server render) so a link
 * shares the search.
 */
export function SearchBox({
  label,
  placeholder,
  initial,
  onSearch,
  hint,
}: {
  label: string;
  placeholder: string;
  initial: string;
  onSearch: (q: string) => void;
  hint?: string;
}) {
  const [text, setText] = useState(initial);
  const reported = useRef(initial.trim());
  const report = useRef(onSearch);
  useEffect(() => {
    report.current = onSearch;
  }, [onSearch]);
  useEffect(() => {
    const q = text.trim();
    if (q === reported.current) return;
    const timer = setTimeout(() => {
      reported.current = q;
      replaceUrlParam("q", q);
      report.current(q);
    }, SEARCH_DEBOUNCE_MS);
    return () => clearTimeout(timer);
  }, [text]);
  return (
    <label className="flex flex-col text-sm">
      <span className="text-xs text-slate-600">{label}</span>
      <input
        type="search"
        className="w-72 max-w-full rounded border border-slate-300 px-2 py-1"
        value={text}
        maxLength={100}
        placeholder={placeholder}
        onChange={(event) => setText(event.target.value)}
      />
      {hint ? <span className="mt-0.5 text-xs text-slate-500">{hint}</span> : null}
    </label>
  );
}

/** Sets (or, empty, removes) one query parameter of the page's URL without navigating. */
export function replaceUrlParam(name: string, value: string | undefined): void {
  const url = new URL(window.location.href);
  if (value) url.searchParams.set(name, value);
  else url.searchParams.delete(name);
  window.history.replaceState(window.history.state, "", url);
}
