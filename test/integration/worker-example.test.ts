/** The shipped example: parcels tiles decode as valid vector tiles; bad definitions stop the worker with exit 2. */
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { after, before, test } from "node:test";
import { VectorTile } from "@mapbox/vector-tile";
import { PbfReader } from "pbf";
import { parse } from "yaml";
import { spawnSync } from "node:child_process";
import { writeParcels } from "../../scripts/examples/parcels";
import { createTestBed, type TestBed } from "../support/stack";

let bed: TestBed;
before(async () => {
  const example = parse(fs.readFileSync("claimwatch.yaml", "utf8")) as {
    rebuilds: Record<string, Record<string, unknown>>;
  };
  const parcels = { ...example.rebuilds.parcels, schedule: undefined };
  delete parcels.schedule;
  bed = await createTestBed({ parcels });
  writeParcels(path.join(bed.dir, "data", "sources", "parcels.geojson"));
});
after(() => bed.close());

test("the parcels example produces valid vector tiles, content-addressed and packed", async () => {
  const worker = await bed.startWorker();
  try {
    const jobId = await bed.trigger("parcels");
    const run = await bed.waitForRun((r) => r.jobId === jobId && r.status === "rebuilt", 60_000);
    assert.match(run.version ?? "", /^in-[0-9a-f]{16}$/, "version defaults to the inputs' hash");
    const current = path.join(bed.dir, "data", "builds", "parcels", "current");
    assert.ok(fs.existsSync(path.join(current, "parcels.tgz")), "the pack step ran");

    const z12 = path.join(current, "tiles", "12");
    const x = fs.readdirSync(z12)[0]!;
    const y = fs.readdirSync(path.join(z12, x))[0]!;
    const tile = new VectorTile(new PbfReader(fs.readFileSync(path.join(z12, x, y))));
    const layer = tile.layers.parcels;
    assert.ok(layer, "layer 'parcels' is in the tile");
    assert.ok(layer.length > 10, `z12 tile has features (${layer.length})`);
    const feature = layer.feature(0);
    assert.equal(feature.type, 3, "parcels are polygons");
    assert.match(String(feature.properties.parcel), /^P-\d{3}-\d{3}$/);
    assert.ok(["residential", "commercial", "industrial", "park", "farmland"].includes(String(feature.properties.use)));
  } finally {
    await worker.stop();
  }
});

for (const [label, mutate, expected] of [
  [
    "a time limit not above the claim TTL",
    (r: Record<string, unknown>) => (r.timeLimit = "60s"),
    /rebuilds\.parcels\.timeLimit: must be longer than claim\.ttl/,
  ],
  [
    "refreshEvery above ttl/2",
    (r: Record<string, unknown>) => (r.claim = { ttl: "90s", refreshEvery: "60s" }),
    /rebuilds\.parcels\.claim\.refreshEvery: must be at most half/,
  ],
  ["an unknown key", (r: Record<string, unknown>) => (r.retires = {}), /rebuilds\.parcels: unknown key 'retires'/],
  [
    "a duration that does not parse",
    (r: Record<string, unknown>) => (r.claim = { ttl: "ninety" }),
    /rebuilds\.parcels\.claim\.ttl: must be a duration/,
  ],
] as const) {
  test(`the worker refuses ${label}: one line naming file and path, exit 2`, () => {
    const file = path.join(bed.dir, `bad-${label.replace(/\W+/g, "-")}.yaml`);
    const rebuild = {
      output: "x",
      steps: [{ name: "noop", run: ["true"] }],
      claim: { ttl: "90s", refreshEvery: "30s" },
    };
    mutate(rebuild);
    fs.writeFileSync(file, JSON.stringify({ rebuilds: { parcels: rebuild } }));
    const result = spawnSync(process.execPath, ["--import", "tsx", "worker/index.ts"], {
      env: { ...bed.env, CLAIMWATCH_CONFIG: file },
      encoding: "utf8",
      timeout: 30_000,
    });
    assert.equal(result.status, 2, result.stderr);
    const lines = result.stderr.trim().split("\n");
    assert.equal(lines.length, 1, result.stderr);
    // `file:line: path: problem` (the line where the offending value is).
    assert.match(lines[0]!, new RegExp(`definitions error: ${path.basename(file).replace(/\./g, "\\.")}:\\d+: `));
    assert.match(lines[0]!, expected);
  });
}

test("two rebuilds sharing an output are refused", () => {
  const file = path.join(bed.dir, "shared-output.yaml");
  const rebuild = { output: "same", steps: [{ name: "noop", run: ["true"] }] };
  fs.writeFileSync(file, JSON.stringify({ rebuilds: { one: rebuild, two: rebuild } }));
  const result = spawnSync(process.execPath, ["--import", "tsx", "worker/index.ts"], {
    env: { ...bed.env, CLAIMWATCH_CONFIG: file },
    encoding: "utf8",
    timeout: 30_000,
  });
  assert.equal(result.status, 2);
  assert.match(result.stderr, /rebuilds\.two\.output: is also the output of rebuild 'one'/);
});
