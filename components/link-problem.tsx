/**
 * Says that the page's link (its query string) had a filter the page could not use, instead of
 * listing everything as if nothing had been asked: "q: must have at most 100 characters".
 */
export function LinkProblem({ problem }: { problem: string | null }) {
  if (!problem) return null;
  return (
    <p
      role="alert"
      data-testid="link-problem"
      className="rounded border border-amber-300 bg-amber-50 px-3 py-2 text-sm text-amber-900"
    >
      This link&apos;s filter was not used ({problem}); showing everything.
    </p>
  );
}
