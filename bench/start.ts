/**
 * Benchmark (not a test): how long the CLI and the worker take to start, from their bundle
 * (lib/launcher/bundle.mjs, as `npx claimwatch` and `npm start` run them) against their
 * TypeScript through tsx (as before), and a bare `node -e 0` as the floor, in the same run,
 * interleaved so drift hits every side alike. The CLI sample is `claimwatch --help`; the worker
 * sample is a start with a definitions file that does not exist: every module is loaded, then it
 * exits 2 with its one-line error — the start-up a deploy waits for, without Redis.
 *
 * Env: BENCH_STARTS (samples per side, default 10).
 * Last line: RESULT cli_bundle_ms=… cli_tsx_ms=… cli_bundle_vs_tsx=… worker_bundle_ms=…
 * worker_tsx_ms=… worker_bundle_vs_tsx=… node_floor_ms=… bundle_build_ms=…
 */
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { bundled, entryArguments } from "../lib/launcher/bundle.mjs";
import { numberFromEnv } from "./env";

const SAMPLES = numberFromEnv("BENCH_STARTS", 10, { min: 1 });
const root = path.resolve(import.meta.dirname, "..");
const env = { ...process.env, CLAIMWATCH_CONFIG: path.join(root, "bench", "no-such-definitions.yaml") };

/** A cold build: the worker's stamp removed first, so `bundled` builds. */
const cache = path.join(root, "node_modules", ".cache", "claimwatch");
for (const file of fs.existsSync(cache) ? fs.readdirSync(cache) : []) {
  if (file.startsWith("worker-index-") && file.endsWith(".json")) fs.rmSync(path.join(cache, file));
}
let started = performance.now();
const built = await bundled("worker/index.ts", (line) => console.log(line));
const buildMs = performance.now() - started;
if (!built) throw new Error("the worker's bundle was not built");
await bundled("cli/index.ts");
const workerBundle = await entryArguments("worker/index.ts");

const sides: Record<string, { args: string[]; env?: NodeJS.ProcessEnv; exit: number }> = {
  node_floor: { args: ["-e", "0"], exit: 0 },
  cli_bundle: { args: [path.join(root, "bin", "claimwatch.mjs"), "--help"], exit: 0 },
  cli_tsx: { args: ["--import", "tsx", path.join(root, "cli", "index.ts"), "--help"], exit: 0 },
  worker_bundle: { args: workerBundle, env, exit: 2 },
  worker_tsx: { args: ["--import", "tsx", path.join(root, "worker", "index.ts")], env, exit: 2 },
};
const samples: Record<string, number[]> = Object.fromEntries(Object.keys(sides).map((name) => [name, []]));

for (let round = 0; round < SAMPLES; round++) {
  for (const [name, side] of Object.entries(sides)) {
    started = performance.now();
    const run = spawnSync(process.execPath, side.args, { cwd: root, env: side.env ?? process.env, encoding: "utf8" });
    const ms = performance.now() - started;
    if (run.status !== side.exit) throw new Error(`${name}: exit ${run.status}, not ${side.exit}\n${run.stderr}`);
    samples[name]!.push(ms);
  }
}

const median = (values: number[]) => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)]!;
};
const ms = Object.fromEntries(Object.entries(samples).map(([name, values]) => [name, median(values)]));
for (const [name, value] of Object.entries(ms)) console.log(`${name.padEnd(14)} median ${value.toFixed(0)} ms`);
console.log(
  `RESULT cli_bundle_ms=${ms.cli_bundle!.toFixed(0)} cli_tsx_ms=${ms.cli_tsx!.toFixed(0)} ` +
    `cli_bundle_vs_tsx=${(ms.cli_bundle! / ms.cli_tsx!).toFixed(2)} worker_bundle_ms=${ms.worker_bundle!.toFixed(0)} ` +
    `worker_tsx_ms=${ms.worker_tsx!.toFixed(0)} worker_bundle_vs_tsx=${(ms.worker_bundle! / ms.worker_tsx!).toFixed(2)} ` +
    `node_floor_ms=${ms.node_floor!.toFixed(0)} bundle_build_ms=${buildMs.toFixed(0)}`,
);
