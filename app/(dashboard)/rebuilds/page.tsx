import { LinkProblem } from "@/components/link-problem";
import { RebuildsTable } from "@/components/rebuilds-table";
import { describeZodError, publicErrorOf } from "@/lib/api/errors";
import { getRebuildsPage, rebuildsQuery, type ApiRebuildPage } from "@/lib/api/rebuilds";
import { getWebContext } from "@/lib/web/context";
import { requireViewer } from "@/lib/web/identity";

export const metadata = { title: "Rebuilds · claimwatch" };
export const dynamic = "force-dynamic";

export default async function RebuildsPage({
  searchParams,
}: {
  searchParams: Promise<Record<string, string | string[]>>;
}) {
  await requireViewer();
  const params = await searchParams;
  const parsed = rebuildsQuery.shape.q.safeParse(typeof params.q === "string" ? params.q : undefined);
  const q = parsed.success ? (parsed.data ?? "") : "";
  // Every parameter of the link is checked as the API checks it (a bad cursor or limit too), and
  // a problem is said above the list rather than ignored (black-box helper-117).
  const whole = rebuildsQuery.safeParse(
    Object.fromEntries(Object.entries(params).filter((e): e is [string, string] => typeof e[1] === "string")),
  );
  const linkProblem = whole.success ? null : describeZodError(whole.error).replace(/^body: /, "");
  let initial: ApiRebuildPage | null = null;
  let readError: string | null = null;
  try {
    // The API's default page size: the one the table asks for (REBUILDS_PAGE).
    initial = await getRebuildsPage(getWebContext(), rebuildsQuery.parse(q ? { q } : {}));
  } catch (error) {
    // Redis down: the banner says so, the table says it could not read, and retries from the browser.
    readError = publicErrorOf(error).message;
  }
  return (
    <section aria-labelledby="page-title" className="space-y-4">
      <h1 id="page-title" className="text-xl font-semibold">
        Rebuilds
      </h1>
      <LinkProblem problem={linkProblem} />
      <RebuildsTable initial={initial} initialQ={q} readError={readError} />
    </section>
  );
}
