import Link from "next/link";
import type { ApiRebuildDetail } from "@/lib/api/rebuilds";
import { RebuildDetailView } from "./rebuild-detail";

/** The rebuild page's frame (server component): heading, way back, and the live view. */
export function RebuildPage({
  name,
  tenant,
  initial,
}: {
  name: string;
  tenant: string | null;
  initial: ApiRebuildDetail | null;
}) {
  return (
    <section aria-labelledby="page-title" className="space-y-4">
      <Link href="/rebuilds" className="text-sm text-sky-700 underline">
        ← Rebuilds
      </Link>
      <h1 id="page-title" className="text-xl font-semibold">
        Rebuild {name}
        {tenant ? ` / ${tenant}` : ""}
      </h1>
      <RebuildDetailView name={name} tenant={tenant} initial={initial} />
    </section>
  );
}
