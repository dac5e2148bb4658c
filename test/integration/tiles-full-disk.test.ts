/**
 * The built-in `tiles` step on a full disk (black-box helper-175): Node's `writeFile` error says
 * only "ENOSPC: no space left on device, write"; the step's error now names the tile file, as the
 * README promises of a full disk's reason, and keeps its errno code (a full disk is transient).
 * A real small filesystem (scripts/faults/small-disk.ts), filled to its last byte.
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, test } from "node:test";
import { fillToLastByte, mountSmallDisk, type SmallDisk } from "../../scripts/faults/small-disk";
import { runTilesStep } from "../../lib/rebuilds/steps/tiles-step";
import type { TilesStep } from "../../lib/rebuilds/definitions";
import { stepContext } from "../support/step-context";

const root = fs.mkdtempSync(path.join(os.tmpdir(), "claimwatch-tiles-disk-"));
let disk: SmallDisk | null = null;
after(() => {
  disk?.unmount();
  fs.rmSync(root, { recursive: true, force: true });
});

test("a tile the full disk refuses: the error names its file and keeps ENOSPC", async (t) => {
  const workDir = path.join(root, "work");
  const mounted = mountSmallDisk(workDir, 2 * 1024 * 1024);
  if (typeof mounted === "string") return t.skip(mounted);
  disk = mounted;
  // The first tile's directory exists already (a full ext4 refuses new directories, whose error
  // names its path anyway): the tile's own write is what the full disk refuses.
  fs.mkdirSync(path.join(workDir, "tiles", "0", "0"), { recursive: true });
  const fd = fs.openSync(path.join(workDir, "filler"), "w");
  try {
    fillToLastByte(fd);
  } finally {
    fs.closeSync(fd);
  }
  fs.writeFileSync(
    path.join(root, "in.geojson"),
    JSON.stringify({
      type: "FeatureCollection",
      features: [{ type: "Feature", properties: {}, geometry: { type: "Point", coordinates: [13.4, 52.5] } }],
    }),
  );
  const step = { name: "tiles", tiles: { input: "in.geojson", layer: "l", minZoom: 0, maxZoom: 0 } } as TilesStep;
  const error = await runTilesStep(step, stepContext(root, { workDir })).then(
    () => null,
    (e: unknown) => e as NodeJS.ErrnoException,
  );
  assert.ok(error, "the full disk refused the tile");
  assert.equal(error.code, "ENOSPC");
  assert.ok(error.message.includes(path.join(workDir, "tiles", "0", "0", "0.pbf")), error.message);
});
