import { LinkProblem } from "@/components/link-problem";
import { EndedClaims } from "@/components/claim-trail";
import { ClaimsTable } from "@/components/claims-table";
import { claimsQuery, getClaims, type ApiClaimPage } from "@/lib/api/claims";
import { getWebContext } from "@/lib/web/context";
import { requireViewer } from "@/lib/web/identity";

export const metadata = { title: "Claims · claimwatch" };
export const dynamic = "force-dynamic";

export default async function ClaimsPage({
  searchParams,
}: {
  searchParams: Promise<Record<string, string | string[]>>;
}) {
  await requireViewer();
  const raw = (await searchParams).q;
  const parsed = claimsQuery.shape.q.safeParse(typeof raw === "string" ? raw : undefined);
  const q = parsed.success ? (parsed.data ?? "") : "";
  const linkProblem = parsed.success ? null : `q: ${parsed.error.issues[0]?.message ?? "not valid"}`;
  let initial: ApiClaimPage | null = null;
  try {
    initial = await getClaims(getWebContext(), { limit: 100, ...(q ? { q } : {}) });
  } catch {
    // Redis down: the banner says so; the table retries from the browser.
  }
  return (
    <section aria-labelledby="page-title" className="space-y-4">
      <h1 id="page-title" className="text-xl font-semibold">
        Claims
      </h1>
      <LinkProblem problem={linkProblem} />
      <ClaimsTable initial={initial} initialQ={q} />
      <EndedClaims />
    </section>
  );
}
