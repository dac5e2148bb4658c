import { LinkProblem } from "@/components/link-problem";
import { ApiError, describeZodError, publicErrorOf } from "@/lib/api/errors";
import { RunCharts } from "@/components/run-charts";
import { RunsTable } from "@/components/runs-table";
import { getRuns, runsQuery } from "@/lib/api/runs";
import type { RunPage } from "@/lib/runs/list";
import { getWebContext } from "@/lib/web/context";
import { requireViewer } from "@/lib/web/identity";

export const metadata = { title: "Runs · claimwatch" };
export const dynamic = "force-dynamic";

export default async function RunsPage({ searchParams }: { searchParams: Promise<Record<string, string | string[]>> }) {
  await requireViewer();
  const params = await searchParams;
  const raw = Object.fromEntries(Object.entries(params).filter((e): e is [string, string] => typeof e[1] === "string"));
  let parsed = runsQuery.safeParse(raw);
  let linkProblem = parsed.success ? null : describeZodError(parsed.error).replace(/^body: /, "");
  // Only the cursor unusable (a link cut short): the filter is kept, the newest page of it shown
  // (black-box helper-157: the whole filter went, while the address bar kept it).
  let pageOnly = false;
  if (!parsed.success && parsed.error.issues.every((issue) => issue.path[0] === "cursor")) {
    const { cursor: _dropped, ...rest } = raw;
    parsed = runsQuery.safeParse(rest);
    pageOnly = parsed.success;
  }
  const filter = parsed.success ? parsed.data : { limit: 25 };
  const { limit: _limit, cursor: linkCursor, ...linkFilter } = filter as typeof filter & { cursor?: string };
  let cursor = linkCursor;
  let initialFilter: typeof linkFilter = linkFilter;
  let initial: RunPage | null = null;
  let readError: string | null = null;
  let rebuilds: { name: string; tenants: string[] | null }[] = [];
  try {
    const context = getWebContext();
    rebuilds = [...context.definitions.rebuilds.values()].map((d) => ({ name: d.name, tenants: d.tenants ?? null }));
    try {
      initial = await getRuns(context, { ...initialFilter, limit: 25, ...(cursor ? { cursor } : {}) });
    } catch (error) {
      if (!(error instanceof ApiError) || error.status !== 400) throw error;
      // A filter the server refuses (a rebuild or tenant not defined here): not used, as a
      // malformed one is, and everything shown (black-box helper-147).
      linkProblem = error.message;
      pageOnly = false;
      cursor = undefined;
      initialFilter = {};
      initial = await getRuns(context, { limit: 25 });
    }
  } catch (error) {
    // Redis down: the table says so, and loads (and reports) from the browser.
    readError = publicErrorOf(error).message;
  }
  return (
    <section aria-labelledby="page-title" className="space-y-4">
      <h1 id="page-title" className="text-xl font-semibold">
        Runs
      </h1>
      <LinkProblem problem={linkProblem} pageOnly={pageOnly} />
      <RunCharts {...(initialFilter.rebuild ? { rebuild: initialFilter.rebuild } : {})} />
      <RunsTable
        initial={initial}
        initialFilter={initialFilter}
        initialCursor={cursor}
        {...(raw.cursor && raw.cursor !== cursor ? { refusedCursor: raw.cursor } : {})}
        rebuilds={rebuilds}
        readError={readError}
      />
    </section>
  );
}
