/**
 * What a list shows before its first answer: "Reading the claims…", or — when the server could
 * not read it for the page (Redis down or slow) — why, while the browser keeps asking. Never an
 * empty list: at 02:00 "no claims" and "could not read the claims" must not look alike
 * (helper-136).
 */
export function NotReadYet({
  what,
  serverError,
  field,
}: {
  /** "the claims", "the workers"… */
  what: string;
  /** Why the server's own read failed (the API's message), or null. */
  serverError?: string | null;
  field?: string;
}) {
  return (
    <p className={serverError ? "text-sm text-red-700" : "text-sm text-slate-600"} role="status" data-field={field}>
      {serverError ? `Could not read ${what}: ${serverError} Trying again from this page…` : `Reading ${what}…`}
    </p>
  );
}
