import { EndedClaims } from "@/components/claim-trail";
import { ClaimsTable } from "@/components/claims-table";
import { getClaims, type ApiClaimPage } from "@/lib/api/claims";
import { getWebContext } from "@/lib/web/context";
import { requireViewer } from "@/lib/web/identity";

export const metadata = { title: "Claims · claimwatch" };
export const dynamic = "force-dynamic";

export default async function ClaimsPage() {
  await requireViewer();
  let initial: ApiClaimPage | null = null;
  try {
    initial = await getClaims(getWebContext(), { limit: 100 });
  } catch {
    // Redis down: the banner says so; the table retries from the browser.
  }
  return (
    <section aria-labelledby="page-title" className="space-y-4">
      <h1 id="page-title" className="text-xl font-semibold">
        Claims
      </h1>
      <ClaimsTable initial={initial} />
      <EndedClaims />
    </section>
  );
}
