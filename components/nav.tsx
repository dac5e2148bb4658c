"use client";

import Link from "next/link";
import { usePathname } from "next/navigation";

export const SECTIONS = [
  { href: "/claims", label: "Claims" },
  { href: "/rebuilds", label: "Rebuilds" },
  { href: "/runs", label: "Runs" },
  { href: "/queue", label: "Queue" },
  { href: "/workers", label: "Workers" },
  { href: "/alerts", label: "Alerts" },
  { href: "/audit", label: "Audit" },
] as const;

export function Nav() {
  const pathname = usePathname();
  return (
    <nav aria-label="Main" className="flex flex-wrap gap-1">
      {SECTIONS.map(({ href, label }) => {
        const active = pathname === href || pathname.startsWith(`${href}/`);
        return (
          <Link
            key={href}
            href={href}
            aria-current={active ? "page" : undefined}
            className={
              active
                ? "rounded bg-slate-900 px-3 py-1.5 text-sm font-medium text-white"
                : "rounded px-3 py-1.5 text-sm text-slate-700 hover:bg-slate-200"
            }
          >
            {label}
          </Link>
        );
      })}
    </nav>
  );
}
