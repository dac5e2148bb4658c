// Example `run` step for the per-tenant `incidents` rebuild: writes a tenant's incident index.
// Deterministic for a (tenant, version): a repeat writes identical bytes.
// Usage: node scripts/examples/incidents.mjs <tenant> <version> <out.json>
import { createHash } from "node:crypto";
import { writeFileSync } from "node:fs";

const [tenant, version, out] = process.argv.slice(2);
if (!tenant || !version || !out) {
  console.error("usage: incidents.mjs <tenant> <version> <out.json>");
  process.exit(64);
}
const seed = createHash("sha256").update(`${tenant}:${version}`).digest();
const incidents = Array.from({ length: 200 }, (_, i) => ({
  id: `${tenant}-${i + 1}`,
  severity: ["low", "medium", "high"][seed[i % seed.length] % 3],
  lon: 13.3 + (seed[(i * 7) % seed.length] / 255) * 0.2,
  lat: 52.45 + (seed[(i * 11) % seed.length] / 255) * 0.1,
}));
writeFileSync(out, JSON.stringify({ tenant, version, incidents }) + "\n");
console.log(`indexed ${incidents.length} incidents for ${tenant}`);
