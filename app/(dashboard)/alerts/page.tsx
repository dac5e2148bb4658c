import { AlertsPanel } from "@/components/alerts-view";
import { getAlerts } from "@/lib/api/alerts";
import { getWebContext } from "@/lib/web/context";
import { requireViewer } from "@/lib/web/identity";

export const metadata = { title: "Alerts · claimwatch" };
export const dynamic = "force-dynamic";

export default async function AlertsPage() {
  await requireViewer();
  const initial = await getAlerts(getWebContext()).catch(() => null);
  return (
    <section aria-labelledby="page-title" className="space-y-4">
      <h1 id="page-title" className="text-xl font-semibold">
        Alerts
      </h1>
      <AlertsPanel initial={initial} />
    </section>
  );
}
