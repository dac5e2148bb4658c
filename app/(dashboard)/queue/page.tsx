import { QueueTable } from "@/components/queue-table";
import { requireViewer } from "@/lib/web/identity";

export const metadata = { title: "Queue · claimwatch" };
export const dynamic = "force-dynamic";

export default async function QueuePage() {
  await requireViewer();
  return (
    <section aria-labelledby="page-title" className="space-y-4">
      <h1 id="page-title" className="text-xl font-semibold">
        Queue
      </h1>
      <p className="text-sm text-slate-600">
        Jobs running, waiting (with their next attempt and why: a retry&apos;s backoff, or deferred behind another
        version&apos;s claim) and recently failed. A schedule&apos;s next tick is listed as scheduled; pause the
        schedule on its rebuild&apos;s page to stop it.
      </p>
      <QueueTable filter={{}} />
    </section>
  );
}
