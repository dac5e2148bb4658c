import { redirect } from "next/navigation";
import type { ReactNode } from "react";
import { HealthBanner } from "@/components/health-banner";
import { LogoutButton } from "@/components/logout-button";
import { Nav } from "@/components/nav";
import { RoleProvider } from "@/components/role";
import { currentHealth } from "@/lib/web/health-report";
import { pageIdentity } from "@/lib/web/identity";

// Every page shows live state: never prerender.
export const dynamic = "force-dynamic";

export default async function DashboardLayout({ children }: { children: ReactNode }) {
  const identity = await pageIdentity();
  if (!identity) redirect("/login");
  const health = await currentHealth();
  return (
    <RoleProvider role={identity.role}>
      <header className="flex items-center gap-6 border-b border-slate-200 bg-white px-6 py-3">
        <a href="/claims" className="text-lg font-semibold tracking-tight">
          claimwatch
        </a>
        <Nav />
        <div className="ml-auto flex items-center gap-3 text-sm text-slate-600">
          <span data-field="identity">
            {identity.name} ({identity.role})
          </span>
          <LogoutButton />
        </div>
      </header>
      <HealthBanner initial={health} />
      <main className="mx-auto max-w-6xl px-6 py-6">{children}</main>
    </RoleProvider>
  );
}
