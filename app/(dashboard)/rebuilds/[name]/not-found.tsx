import { RebuildNotFound } from "@/components/rebuild-not-found";
import { getWebContext } from "@/lib/web/context";

/** An unknown rebuild or tenant in `/rebuilds/<name>[/<tenant>]`: a 404 that names the valid ones. */
export default function RebuildNotFoundPage() {
  const rebuilds = [...getWebContext().definitions.rebuilds.values()].map((r) => ({
    name: r.name,
    tenants: r.tenants ?? null,
  }));
  return <RebuildNotFound rebuilds={rebuilds} />;
}
