/**
 * Built-in `tiles` step: GeoJSON → Mapbox vector tiles (geojson-vt slices, vt-pbf encodes),
 * written as `{work}/tiles/z/x/y.pbf`. Tiling is CPU work on the worker's event loop, so the step
 * yields between tiles: the abort signal is checked, and BullMQ's lock renewal and the claim's
 * refresh timers get to run.
 */
import fs from "node:fs/promises";
import path from "node:path";
import { setImmediate as yieldToEventLoop } from "node:timers/promises";
import geojsonvt from "geojson-vt";
import vtpbf from "vt-pbf";
import type { TilesStep } from "../definitions";
import { makeDirectory } from "../output";
import { StepFailedError, TransientStepError, type StepContext } from "./context";
import { TRANSIENT_ERRNO } from "./run-step";

/** Yield at least this often (ms) while tiling. */
const SLICE_MS = 20;

export async function runTilesStep(step: TilesStep, context: StepContext): Promise<{ tiles: number }> {
  const { input, layer, minZoom, maxZoom } = step.tiles;
  const inputPath = path.resolve(context.baseDir, input);
  let data: unknown;
  let text: string;
  try {
    text = await fs.readFile(inputPath, "utf8");
  } catch (error) {
    const message = `step ${step.name}: cannot read GeoJSON ${input}: ${(error as Error).message}`;
    const code = (error as NodeJS.ErrnoException).code;
    // EIO, EMFILE, EAGAIN …: worth another attempt; a missing file is not.
    if (code && TRANSIENT_ERRNO.has(code)) throw new TransientStepError(message, { cause: error });
    throw new StepFailedError(message, { cause: error });
  }
  try {
    data = JSON.parse(text);
  } catch (error) {
    throw new StepFailedError(`step ${step.name}: cannot read GeoJSON ${input}: ${(error as Error).message}`);
  }
  context.signal.throwIfAborted();
  context.log(`[${step.name}] slicing ${input} (layer ${layer}, z${minZoom}-z${maxZoom})`);

  // geojson-vt indexes the top zooms up front and drills down lazily in getTile.
  const index = new geojsonvt(data as never, { maxZoom });
  // Breadth-first from the root, so progress follows the zoom level. getTile returns null where
  // there is no data at all (that subtree is skipped); a tile may be empty at a low zoom only
  // because small shapes are simplified away, so its children are still visited.
  const queue: [number, number, number][] = [[0, 0, 0]];
  let head = 0;
  let written = 0;
  let sliceStarted = performance.now();
  const tilesDir = path.join(context.workDir, "tiles");

  while (head < queue.length) {
    const [z, x, y] = queue[head++]!;
    const tile = index.getTile(z, x, y);
    if (!tile) continue;
    if (z >= minZoom && tile.features.length > 0) {
      const buffer = vtpbf.fromGeojsonVt({ [layer]: tile as never }, { version: 2 });
      const dir = path.join(tilesDir, String(z), String(x));
      await makeDirectory(dir); // a full disk's ENOSPC, not the ENOENT a recursive mkdir says
      await writeNamed(path.join(dir, `${y}.pbf`), buffer);
      written++;
    }
    if (z < maxZoom) {
      for (const [dx, dy] of [
        [1, 1],
        [0, 1],
        [1, 0],
        [0, 0],
      ] as const)
        queue.push([z + 1, x * 2 + dx, y * 2 + dy]);
    }
    if (performance.now() - sliceStarted > SLICE_MS) {
      await yieldToEventLoop();
      context.signal.throwIfAborted();
      context.progress(Math.min(0.99, z / (maxZoom + 1)));
      // Drop the visited part of the queue now and then; the rest of a level stays.
      if (head > 10_000) {
        queue.splice(0, head);
        head = 0;
      }
      sliceStarted = performance.now();
    }
  }
  context.signal.throwIfAborted();
  context.log(`[${step.name}] wrote ${written} tiles`);
  context.progress(1);
  return { tiles: written };
}

/**
 * `fs.writeFile`, whose error names the file: Node's says only "ENOSPC: no space left on device,
 * write", and a full disk's reason must name where (black-box helper-175). The errno code stays.
 */
async function writeNamed(file: string, data: Uint8Array): Promise<void> {
  try {
    await fs.writeFile(file, data);
  } catch (error) {
    const failure = error as NodeJS.ErrnoException;
    if (!failure.code || failure.message.includes(file)) throw error;
    throw Object.assign(new Error(`${failure.message} '${file}'`, { cause: error }), {
      code: failure.code,
      errno: failure.errno,
      syscall: failure.syscall,
      path: file,
    });
  }
}
