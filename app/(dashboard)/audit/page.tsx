import { AuditTable } from "@/components/audit-table";
import { getAudit } from "@/lib/api/audit";
import { getWebContext } from "@/lib/web/context";
import { requireViewer } from "@/lib/web/identity";

export const metadata = { title: "Audit · claimwatch" };
export const dynamic = "force-dynamic";

export default async function AuditPage() {
  await requireViewer();
  const initial = await getAudit(getWebContext(), { limit: 100 }).catch(() => null);
  return (
    <section aria-labelledby="page-title" className="space-y-4">
      <h1 id="page-title" className="text-xl font-semibold">
        Audit
      </h1>
      <p className="text-sm text-slate-600">
        Force releases (also refused ones) and triggers, newest first; kept 90 days.
      </p>
      <AuditTable initial={initial} />
    </section>
  );
}
