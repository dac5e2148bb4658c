/**
 * Writes the example parcels GeoJSON (data/sources/parcels.geojson): a few MB of land parcels,
 * generated deterministically — the same bytes on every machine, so its hash (the rebuild's
 * default version) is stable. Runs before `npm start` (prestart) when the file is missing and the
 * definitions in use (CLAIMWATCH_CONFIG) read it; other definitions leave data/ alone.
 */
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { parseConfig } from "../../lib/config";
import { loadDefinitions, type Definitions } from "../../lib/rebuilds/definitions";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..");

/** mulberry32: a tiny seeded PRNG; deterministic across platforms. */
function random(seed: number): () => number {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = seed;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export function parcelsGeoJson(columns = 160, rows = 100): object {
  const next = random(20260710);
  const west = 13.3;
  const south = 52.45;
  const width = 0.2 / columns;
  const height = 0.1 / rows;
  const uses = ["residential", "commercial", "industrial", "park", "farmland"];
  const features = [];
  for (let row = 0; row < rows; row++) {
    for (let column = 0; column < columns; column++) {
      const x = west + column * width;
      const y = south + row * height;
      const inset = () => width * 0.05 + next() * width * 0.1;
      const ring = [
        [x + inset(), y + inset()],
        [x + width - inset(), y + inset()],
        [x + width - inset(), y + height - inset()],
        [x + inset(), y + height - inset()],
      ].map(([lon, lat]) => [Number(lon!.toFixed(7)), Number(lat!.toFixed(7))]);
      ring.push(ring[0]!);
      features.push({
        type: "Feature",
        id: row * columns + column + 1,
        properties: {
          parcel: `P-${String(row).padStart(3, "0")}-${String(column).padStart(3, "0")}`,
          use: uses[Math.floor(next() * uses.length)],
          area_m2: Math.round(1000 + next() * 4000),
        },
        geometry: { type: "Polygon", coordinates: [ring] },
      });
    }
  }
  return { type: "FeatureCollection", features };
}

export function writeParcels(file: string): boolean {
  if (fs.existsSync(file)) return false;
  fs.mkdirSync(path.dirname(file), { recursive: true });
  const temp = `${file}.tmp-${process.pid}`;
  fs.writeFileSync(temp, JSON.stringify(parcelsGeoJson()) + "\n");
  fs.renameSync(temp, file);
  return true;
}

/** Whether any rebuild reads `file`: as an input, or as the input of a tiles step. */
export function definitionsRead(definitions: Pick<Definitions, "rebuilds">, file: string): boolean {
  for (const rebuild of definitions.rebuilds.values()) {
    if (rebuild.inputPaths.includes(file)) return true;
    for (const step of rebuild.steps) {
      if ("tiles" in step && path.resolve(rebuild.baseDir, step.tiles.input) === file) return true;
    }
  }
  return false;
}

/** prestart's decision: write the example file only when it is missing and the definitions read it. */
export function prepareExampleData(
  definitions: Pick<Definitions, "rebuilds">,
  file: string,
): "written" | "present" | "not-needed" {
  if (!definitionsRead(definitions, file)) return "not-needed";
  return writeParcels(file) ? "written" : "present";
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const file = path.join(root, "data", "sources", "parcels.geojson");
  // A bad environment or definitions file is `npm start`'s to report, right after this.
  const config = parseConfig(process.env);
  const loaded = config.ok ? loadDefinitions(config.config.definitionsPath) : undefined;
  if (loaded?.ok && prepareExampleData(loaded.definitions, file) === "written") {
    process.stdout.write(
      `[claimwatch] wrote example data ${path.relative(root, file)} (${fs.statSync(file).size} bytes)\n`,
    );
  }
}
