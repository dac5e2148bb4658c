import type { Metadata } from "next";
import type { ReactNode } from "react";
import { HealthBanner } from "@/components/health-banner";
import { Nav } from "@/components/nav";
import { Providers } from "@/components/providers";
import { currentHealth } from "@/lib/health/report";
import "./globals.css";

export const metadata: Metadata = {
  title: "claimwatch",
  description: "Claims, rebuilds and runs on Redis",
};

// Every page shows live state: never prerender.
export const dynamic = "force-dynamic";

export default async function RootLayout({ children }: { children: ReactNode }) {
  const health = await currentHealth();
  return (
    <html lang="en">
      <body className="min-h-screen bg-slate-50 text-slate-900">
        <Providers>
          <header className="flex items-center gap-6 border-b border-slate-200 bg-white px-6 py-3">
            <a href="/claims" className="text-lg font-semibold tracking-tight">
              claimwatch
            </a>
            <Nav />
          </header>
          <HealthBanner initial={health} />
          <main className="mx-auto max-w-6xl px-6 py-6">{children}</main>
        </Providers>
      </body>
    </html>
  );
}
