import { notFound } from "next/navigation";
import { RebuildPage } from "@/components/rebuild-page";
import { ApiError } from "@/lib/api/errors";
import { getRebuildDetail, type ApiRebuildDetail } from "@/lib/api/rebuilds";
import { getWebContext } from "@/lib/web/context";
import { requireViewer } from "@/lib/web/identity";

export const dynamic = "force-dynamic";

export async function generateMetadata({ params }: { params: Promise<{ name: string; tenant: string }> }) {
  const { name, tenant } = await params;
  return { title: `${decodeURIComponent(name)} / ${decodeURIComponent(tenant)} · Rebuilds · claimwatch` };
}

export default async function RebuildTenantPage({ params }: { params: Promise<{ name: string; tenant: string }> }) {
  await requireViewer();
  const { name: rawName, tenant: rawTenant } = await params;
  const [name, tenant] = [decodeURIComponent(rawName), decodeURIComponent(rawTenant)];
  let initial: ApiRebuildDetail | null = null;
  try {
    initial = await getRebuildDetail(getWebContext(), name, tenant);
  } catch (error) {
    if (error instanceof ApiError && error.status === 404) notFound();
  }
  return <RebuildPage name={name} tenant={tenant} initial={initial} />;
}
