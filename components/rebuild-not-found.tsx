"use client";

import Link from "next/link";
import { useParams } from "next/navigation";
import { rebuildHref } from "@/lib/ui/queries";

export interface KnownRebuild {
  name: string;
  tenants: string[] | null;
}

function decoded(segment: string | string[] | undefined): string | null {
  if (typeof segment !== "string") return null;
  try {
    return decodeURIComponent(segment);
  } catch {
    return segment;
  }
}

/**
 * `/rebuilds/<name>[/<tenant>]` for a name the definitions do not have: says which part is
 * unknown and links the valid ones (the wording of lib/rebuilds/definitions' problems).
 */
export function RebuildNotFound({ rebuilds }: { rebuilds: KnownRebuild[] }) {
  const params = useParams<{ name?: string; tenant?: string }>();
  const name = decoded(params.name) ?? "";
  const tenant = decoded(params.tenant);
  const rebuild = rebuilds.find((r) => r.name === name);
  let problem: string;
  let links: { label: string; href: string }[];
  if (!rebuild) {
    problem = `No rebuild named '${name.slice(0, 80)}'.`;
    links = rebuilds.map((r) => ({ label: r.name, href: rebuildHref(r.name) }));
  } else if (!rebuild.tenants) {
    problem = `Rebuild '${rebuild.name}' has no tenants, so it has no page '${(tenant ?? "").slice(0, 80)}'.`;
    links = [{ label: rebuild.name, href: rebuildHref(rebuild.name) }];
  } else {
    problem = `'${(tenant ?? "").slice(0, 80)}' is not a tenant of rebuild '${rebuild.name}'.`;
    links = rebuild.tenants.map((t) => ({ label: `${rebuild.name} / ${t}`, href: rebuildHref(rebuild.name, t) }));
  }
  return (
    <section aria-labelledby="page-title" className="space-y-3">
      <Link href="/rebuilds" className="text-sm text-sky-700 underline">
        ← Rebuilds
      </Link>
      <h1 id="page-title" className="text-xl font-semibold">
        Rebuild not found
      </h1>
      <p className="text-sm text-slate-700" role="status">
        {problem} {links.length ? (rebuild ? "Its pages:" : "The rebuilds:") : ""}
      </p>
      {links.length ? (
        <ul aria-label={rebuild ? "Its pages" : "Rebuilds"} className="list-inside list-disc text-sm">
          {links.map((link) => (
            <li key={link.href}>
              <Link className="text-sky-700 underline" href={link.href}>
                {link.label}
              </Link>
            </li>
          ))}
        </ul>
      ) : (
        <p className="text-sm text-slate-700">The definitions file has no rebuilds.</p>
      )}
    </section>
  );
}
