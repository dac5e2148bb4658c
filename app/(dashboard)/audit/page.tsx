import Link from "next/link";
import { AuditTable } from "@/components/audit-table";
import { AUDIT_ENTRY_ID, getAudit } from "@/lib/api/audit";
import { getWebContext } from "@/lib/web/context";
import { requireViewer } from "@/lib/web/identity";

export const metadata = { title: "Audit · claimwatch" };
export const dynamic = "force-dynamic";

/** `?entry=<id>`: a link to one entry (from a run a force release aborted, or the CLI's output). */
export default async function AuditPage({ searchParams }: { searchParams: Promise<{ entry?: string | string[] }> }) {
  await requireViewer();
  const asked = (await searchParams).entry;
  const entry = typeof asked === "string" && AUDIT_ENTRY_ID.test(asked) ? asked : null;
  const initial = await getAudit(getWebContext(), { limit: 100, ...(entry ? { entry } : {}) }).catch(() => null);
  return (
    <section aria-labelledby="page-title" className="space-y-4">
      <h1 id="page-title" className="text-xl font-semibold">
        Audit
      </h1>
      <p className="text-sm text-slate-600">
        Every operator action, login and logout (refused ones too), newest first; kept 90 days.
      </p>
      {entry ? (
        <p className="text-sm text-slate-700">
          From entry <span className="font-mono text-xs">{entry}</span> (marked) and older ·{" "}
          <Link className="text-sky-700 underline" href="/audit">
            newest entries
          </Link>
        </p>
      ) : null}
      <AuditTable initial={initial} entry={entry} />
    </section>
  );
}
