import { notFound } from "next/navigation";
import { RebuildPage } from "@/components/rebuild-page";
import { ApiError } from "@/lib/api/errors";
import { getRebuildDetail, type ApiRebuildDetail } from "@/lib/api/rebuilds";
import { getWebContext } from "@/lib/web/context";
import { requireViewer } from "@/lib/web/identity";

export const dynamic = "force-dynamic";

export async function generateMetadata({ params }: { params: Promise<{ name: string }> }) {
  return { title: `${decodeURIComponent((await params).name)} · Rebuilds · claimwatch` };
}

export default async function RebuildNamePage({ params }: { params: Promise<{ name: string }> }) {
  await requireViewer();
  const name = decodeURIComponent((await params).name);
  let initial: ApiRebuildDetail | null = null;
  try {
    initial = await getRebuildDetail(getWebContext(), name, undefined);
  } catch (error) {
    if (error instanceof ApiError && error.status === 404) notFound();
    // Redis down: the banner says so; the view retries from the browser.
  }
  return <RebuildPage name={name} tenant={null} initial={initial} />;
}
