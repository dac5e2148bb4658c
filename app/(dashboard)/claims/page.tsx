import { LinkProblem } from "@/components/link-problem";
import { ClaimsTable } from "@/components/claims-table";
import { claimsQuery, getClaims, type ApiClaimPage } from "@/lib/api/claims";
import { describeZodError, publicErrorOf } from "@/lib/api/errors";
import { checkClaimName } from "@/lib/claims/name";
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
  const params = await searchParams;
  const parsed = claimsQuery.shape.q.safeParse(typeof params.q === "string" ? params.q : undefined);
  const q = parsed.success ? (parsed.data ?? "") : "";
  // Every parameter of the link is checked as the API checks it (a bad cursor or limit too), and
  // a problem is said above the list rather than ignored (black-box helper-117).
  const whole = claimsQuery.safeParse(
    Object.fromEntries(Object.entries(params).filter((e): e is [string, string] => typeof e[1] === "string")),
  );
  const linkProblem = !whole.success
    ? describeZodError(whole.error).replace(/^body: /, "")
    : whole.data.cursor !== undefined && !checkClaimName(whole.data.cursor).ok
      ? "cursor: not a claim name"
      : null;
  let initial: ApiClaimPage | null = null;
  let readError: string | null = null;
  try {
    initial = await getClaims(getWebContext(), { limit: 100, ...(q ? { q } : {}) });
  } catch (error) {
    // Redis down: the banner says so, the table says it could not read, and retries from the browser.
    readError = publicErrorOf(error).message;
  }
  return (
    <section aria-labelledby="page-title" className="space-y-4">
      <h1 id="page-title" className="text-xl font-semibold">
        Claims
      </h1>
      <LinkProblem problem={linkProblem} />
      <ClaimsTable initial={initial} initialQ={q} readError={readError} />
    </section>
  );
}
