/**
 * Benchmark (not a test): the start cost of a trivial `run` step (`true`) under this host's step
 * containment (lib/rebuilds/steps/containment.ts) against a plain `spawn` of the same program, in
 * the same run, interleaved: rounds alternate the two sides so drift hits both alike. Each sample
 * is spawn → exit → pipes closed, as the worker waits for them.
 *
 * Env: BENCH_STEPS (samples per side, default 200); CLAIMWATCH_STEP_CONTAINMENT picks the mode
 * (`cgroup`, `pid-namespace`, `process-group`; default: the strongest, as the worker does).
 * As root, steps also see their output's published builds read-only (a mount namespace per worker,
 * builds-namespace.ts: `nsenter` before the program); the same containment without that
 * shield is measured beside it, so its cost shows on its own.
 * Last line: RESULT step_overhead_ms=<median containment − median plain> containment=<mode>
 *   unshielded_overhead_ms=<the same without the read-only builds> builds=<read-only|writable>
 */
import { spawn } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import type { RunStep } from "../lib/rebuilds/definitions";
import { detectContainment, type Containment } from "../lib/rebuilds/steps/containment";
import { runCommandStep } from "../lib/rebuilds/steps/run-step";
import { numberFromEnv } from "./env";

const SAMPLES = numberFromEnv("BENCH_STEPS", 200, { min: 1 });
const containment = detectContainment();
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "cw-bench-steps-"));
const step: RunStep = { name: "noop", run: ["true"], transientExitCodes: [], killGrace: 5_000, limits: {} };
const context = {
  signal: new AbortController().signal,
  workDir: dir,
  outputDir: dir,
  baseDir: dir,
  version: "v",
  tenant: undefined,
  rebuild: "bench",
  runId: "bench-a1",
  fence: 1,
  log: () => {},
  progress: () => {},
};

async function plain(): Promise<number> {
  const start = performance.now();
  const child = spawn("true", [], { stdio: ["ignore", "pipe", "pipe"], detached: true });
  await new Promise((resolve) => child.once("close", resolve));
  return performance.now() - start;
}

const unshielded: Containment = {
  ...containment,
  builds: { shielded: false, why: "measured without it" },
  ...(containment.forLimitedSteps && {
    forLimitedSteps: { ...containment.forLimitedSteps, builds: { shielded: false, why: "measured without it" } },
  }),
};

async function contained(under: Containment = containment): Promise<number> {
  const start = performance.now();
  await runCommandStep(step, context, under);
  return performance.now() - start;
}

const median = (values: number[]) => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)]!;
};
const p95 = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length * 0.95)]!;

// Warm-up: page cache, first-spawn costs.
for (let i = 0; i < 10; i++) {
  await plain();
  await contained();
  await contained(unshielded);
}
const plainMs: number[] = [];
const containedMs: number[] = [];
const unshieldedMs: number[] = [];
const sides = [
  async () => plainMs.push(await plain()),
  async () => containedMs.push(await contained()),
  async () => unshieldedMs.push(await contained(unshielded)),
];
for (let i = 0; i < SAMPLES; i++) {
  // Each round in another order (of the three rotations), so drift hits every side alike.
  for (let k = 0; k < sides.length; k++) await sides[(i + k) % sides.length]!();
}
fs.rmSync(dir, { recursive: true, force: true });
const overhead = median(containedMs) - median(plainMs);
const unshieldedOverhead = median(unshieldedMs) - median(plainMs);
console.log(`containment: ${containment.mode} (${containment.detail})`);
console.log(
  `plain spawn:  median ${median(plainMs).toFixed(2)} ms, p95 ${p95(plainMs).toFixed(2)} ms (${SAMPLES} samples)`,
);
console.log(
  `contained:    median ${median(containedMs).toFixed(2)} ms, p95 ${p95(containedMs).toFixed(2)} ms (${SAMPLES} samples)`,
);
console.log(
  `unshielded:   median ${median(unshieldedMs).toFixed(2)} ms, p95 ${p95(unshieldedMs).toFixed(2)} ms (${SAMPLES} samples)`,
);
console.log(
  `RESULT step_overhead_ms=${overhead.toFixed(2)} containment=${containment.mode} unshielded_overhead_ms=${unshieldedOverhead.toFixed(2)} builds=${containment.builds.shielded ? "read-only" : "writable"}`,
);
