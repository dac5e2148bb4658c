import { WorkersTable } from "@/components/workers-table";
import { getWorkers } from "@/lib/api/workers";
import { getWebContext } from "@/lib/web/context";
import { requireViewer } from "@/lib/web/identity";

export const metadata = { title: "Workers · claimwatch" };
export const dynamic = "force-dynamic";

export default async function WorkersPage() {
  await requireViewer();
  const initial = await getWorkers(getWebContext()).catch(() => null);
  return (
    <section aria-labelledby="page-title" className="space-y-4">
      <h1 id="page-title" className="text-xl font-semibold">
        Workers
      </h1>
      <WorkersTable initial={initial} />
    </section>
  );
}
