import { RebuildsTable } from "@/components/rebuilds-table";
import { getRebuilds, type ApiRebuild } from "@/lib/api/rebuilds";
import { getWebContext } from "@/lib/web/context";
import { requireViewer } from "@/lib/web/identity";

export const metadata = { title: "Rebuilds · claimwatch" };
export const dynamic = "force-dynamic";

export default async function RebuildsPage() {
  await requireViewer();
  let initial: ApiRebuild[] | null = null;
  try {
    initial = await getRebuilds(getWebContext());
  } catch {
    // Redis down: the banner says so; the table retries from the browser.
  }
  return (
    <section aria-labelledby="page-title" className="space-y-4">
      <h1 id="page-title" className="text-xl font-semibold">
        Rebuilds
      </h1>
      <RebuildsTable initial={initial} />
    </section>
  );
}
