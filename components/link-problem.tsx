/**
 * Says that the page's link (its query string) had a filter the page could not use, instead of
 * listing everything as if nothing had been asked: "q: must have at most 100 characters". A page
 * link (`?cursor=`) whose filter could be kept says only that its page was not used (`pageOnly`).
 */
export function LinkProblem({ problem, pageOnly = false }: { problem: string | null; pageOnly?: boolean }) {
  if (!problem) return null;
  return (
    <p
      role="alert"
      data-testid="link-problem"
      className="rounded border border-amber-300 bg-amber-50 px-3 py-2 text-sm text-amber-900"
    >
      {pageOnly
        ? `This link's page was not used (${problem}); showing the newest of its filter.`
        : `This link's filter was not used (${problem}); showing everything.`}
    </p>
  );
}
