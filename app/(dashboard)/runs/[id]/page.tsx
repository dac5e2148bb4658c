import Link from "next/link";
import { notFound } from "next/navigation";
import { RunDetailView } from "@/components/run-detail";
import { ApiError } from "@/lib/api/errors";
import { getRunDetail, type RunDetail } from "@/lib/api/runs";
import { getWebContext } from "@/lib/web/context";
import { requireViewer } from "@/lib/web/identity";

export const dynamic = "force-dynamic";

export default async function RunPage({ params }: { params: Promise<{ id: string }> }) {
  await requireViewer();
  const { id } = await params;
  let initial: RunDetail | null = null;
  try {
    initial = await getRunDetail(getWebContext(), id);
  } catch (error) {
    if (error instanceof ApiError && error.status === 404) notFound();
    // Redis down: the banner says so; the view retries from the browser.
  }
  return (
    <section aria-labelledby="page-title" className="space-y-4">
      <Link href="/runs" className="text-sm text-sky-700 underline">
        ← Runs
      </Link>
      <h1 id="page-title" className="font-mono text-lg font-semibold break-all">
        Run {id}
      </h1>
      <RunDetailView id={id} initial={initial} />
    </section>
  );
}
