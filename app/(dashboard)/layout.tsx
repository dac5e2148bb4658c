import { redirect } from "next/navigation";
import type { ReactNode } from "react";
import { HealthBanner } from "@/components/health-banner";
import { LiveEvents, LiveStatus } from "@/components/live-events";
import { LogoutButton } from "@/components/logout-button";
import { Nav } from "@/components/nav";
import { RoleProvider } from "@/components/role";
import { ThemeToggle } from "@/components/theme";
import { RenderTimeProvider } from "@/components/use-now";
import { currentHealth } from "@/lib/web/health-report";
import { pageIdentity } from "@/lib/web/identity";

// Every page shows live state: never prerender.
export const dynamic = "force-dynamic";

export default async function DashboardLayout({ children }: { children: ReactNode }) {
  const identity = await pageIdentity();
  if (!identity) redirect("/login");
  const health = await currentHealth();
  // A server component renders once per request: this is the request's render time, handed to
  // the client so hydration repeats exactly what the server wrote (components/use-now).
  // eslint-disable-next-line react-hooks/purity
  const renderedAt = Date.now();
  return (
    <RenderTimeProvider now={renderedAt}>
      <RoleProvider role={identity.role}>
        <LiveEvents>
          <header className="flex flex-wrap items-center gap-x-6 gap-y-2 border-b border-slate-200 bg-white px-3 py-3 sm:px-6">
            <a href="/claims" className="flex items-center gap-2 text-lg font-semibold tracking-tight">
              <img src="/icon.svg" alt="" width={20} height={20} />
              claimwatch
            </a>
            <Nav />
            <div className="ml-auto flex flex-wrap items-center gap-3 text-sm text-slate-600">
              <LiveStatus />
              <ThemeToggle />
              <span data-field="identity">
                {identity.name} ({identity.role})
              </span>
              <LogoutButton />
            </div>
          </header>
          <HealthBanner initial={health} />
          <main className="mx-auto max-w-6xl px-3 py-6 sm:px-6">{children}</main>
        </LiveEvents>
      </RoleProvider>
    </RenderTimeProvider>
  );
}
