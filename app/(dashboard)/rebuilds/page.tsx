import { LinkProblem } from "@/components/link-problem";
import { RebuildsTable } from "@/components/rebuilds-table";
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
  const raw = (await searchParams).q;
  const parsed = rebuildsQuery.shape.q.safeParse(typeof raw === "string" ? raw : undefined);
  const q = parsed.success ? (parsed.data ?? "") : "";
  const linkProblem = parsed.success ? null : `q: ${parsed.error.issues[0]?.message ?? "not valid"}`;
  let initial: ApiRebuildPage | null = null;
  try {
    // The API's default page size: the one the table asks for (REBUILDS_PAGE).
    initial = await getRebuildsPage(getWebContext(), rebuildsQuery.parse(q ? { q } : {}));
  } catch {
    // Redis down: the banner says so; the table retries from the browser.
  }
  return (
    <section aria-labelledby="page-title" className="space-y-4">
      <h1 id="page-title" className="text-xl font-semibold">
        Rebuilds
      </h1>
      <LinkProblem problem={linkProblem} />
      <RebuildsTable initial={initial} initialQ={q} />
    </section>
  );
}
