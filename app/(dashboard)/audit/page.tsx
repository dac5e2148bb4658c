import Link from "next/link";
import { AuditTable } from "@/components/audit-table";
import { LinkProblem } from "@/components/link-problem";
import { describeZodError } from "@/lib/api/errors";
import { auditQuery, getAudit } from "@/lib/api/audit";
import { getWebContext } from "@/lib/web/context";
import { requireViewer } from "@/lib/web/identity";

export const metadata = { title: "Audit · claimwatch" };
export const dynamic = "force-dynamic";

/** A page of the audit log, newest first: 100 entries. */
const PAGE = 100;

/**
 * `?entry=<id>`: a link to one entry (from a run a force release aborted, or the CLI's output);
 * `?cursor=<id>`: an older page (the Older link), so Back, a reload or a link open it again.
 */
export default async function AuditPage({
  searchParams,
}: {
  searchParams: Promise<Record<string, string | string[]>>;
}) {
  await requireViewer();
  const raw = Object.fromEntries(
    Object.entries(await searchParams).filter(
      (e): e is [string, string] => typeof e[1] === "string" && (e[0] === "entry" || e[0] === "cursor"),
    ),
  );
  const parsed = auditQuery.safeParse({ ...raw, limit: String(PAGE) });
  const linkProblem = parsed.success ? null : describeZodError(parsed.error).replace(/^body: /, "");
  const entry = parsed.success ? (parsed.data.entry ?? null) : null;
  const cursor = parsed.success ? (parsed.data.cursor ?? null) : null;
  const initial = await getAudit(getWebContext(), {
    limit: PAGE,
    ...(entry ? { entry } : {}),
    ...(cursor ? { cursor } : {}),
  }).catch(() => null);
  return (
    <section aria-labelledby="page-title" className="space-y-4">
      <h1 id="page-title" className="text-xl font-semibold">
        Audit
      </h1>
      <p className="text-sm text-slate-600">
        Every operator action, login and logout (refused ones too), newest first; kept 90 days.
      </p>
      <LinkProblem problem={linkProblem} />
      {entry || cursor ? (
        <p className="text-sm text-slate-700">
          {entry ? (
            <>
              From entry <span className="font-mono text-xs">{entry}</span> (marked) and older ·{" "}
            </>
          ) : (
            "Older entries · "
          )}
          <Link className="text-sky-700 underline" href="/audit">
            newest entries
          </Link>
        </p>
      ) : null}
      <AuditTable initial={initial} entry={entry} cursor={cursor} limit={PAGE} />
    </section>
  );
}
