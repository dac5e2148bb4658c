/**
 * The run records the benchmarks seed (bench:api, bench:layout): the rebuilds they are spread
 * over and one finished run's fields, as the worker leaves them. One module, so every benchmark
 * that reports bytes per record measures the same records.
 */
import type { FinalRunStatus } from "../lib/runs/transitions";
import { runIdOf, type RunRecord } from "../lib/runs/types";
import { numberFromEnv } from "./env";

export const FLEET_REBUILDS = numberFromEnv("BENCH_FLEET_REBUILDS", 100, { min: 1 });
export const FLEET_TENANTS = numberFromEnv("BENCH_FLEET_TENANTS", 100, { min: 1 });
/** Run records are spread over this window (newest now), as a month of history would be. */
const HISTORY_MS = 30 * 86_400_000;

/** Rebuilds the runs are spread over; `archive` is tenanted, so rebuild+tenant indexes fill too. */
export const REBUILDS = {
  tiles: { output: "out/tiles", steps: [{ name: "tile", run: ["true"] }] },
  archive: { output: "out/archive", tenants: ["acme", "globex", "initech"], steps: [{ name: "pack", run: ["true"] }] },
  reports: { output: "out/reports", steps: [{ name: "render", run: ["true"] }] },
  search: { output: "out/search", tenants: ["acme", "globex"], steps: [{ name: "index", run: ["true"] }] },
};
type Target = { rebuild: string; tenant: string | null };
const targetsOf = (rebuilds: Record<string, { output: string; tenants?: string[] }>): Target[] =>
  Object.entries(rebuilds).flatMap(([rebuild, d]): Target[] =>
    d.tenants ? d.tenants.map((tenant) => ({ rebuild, tenant })) : [{ rebuild, tenant: null }],
  );
export const TARGETS = targetsOf(REBUILDS);
/** The generated rebuilds: `fleet-00` … with tenants `t000` …, a many-tenant installation. */
export const FLEET: Record<string, { output: string; tenants: string[]; steps: { name: string; run: string[] }[] }> =
  Object.fromEntries(
    Array.from({ length: FLEET_REBUILDS }, (_, r) => {
      const name = `fleet-${String(r).padStart(2, "0")}`;
      const tenants = Array.from({ length: FLEET_TENANTS }, (_, t) => `t${String(t).padStart(3, "0")}`);
      return [name, { output: `out/${name}`, tenants, steps: [{ name: "build", run: ["true"] }] }];
    }),
  );
export const FLEET_TARGETS = targetsOf(FLEET);
export const ROWS = TARGETS.length + FLEET_TARGETS.length;

/** Mostly rebuilt/skipped, as in production; a few of every other status. */
const STATUS_MIX: FinalRunStatus[] = [
  ...Array<FinalRunStatus>(12).fill("rebuilt"),
  ...Array<FinalRunStatus>(5).fill("skipped"),
  "failed",
  "aborted",
  "superseded",
  "cancelled",
];

/** A finished run as the worker leaves it: all fields set, two steps, realistic sizes. */
export function runRecord(i: number, now: number): RunRecord & { status: FinalRunStatus } {
  // Even runs go to the hand-written rebuilds, odd ones to the fleet's 10 000 rows.
  const j = Math.floor(i / 2);
  const target = i % 2 === 0 ? TARGETS[j % TARGETS.length]! : FLEET_TARGETS[j % FLEET_TARGETS.length]!;
  // Every status for every target (the status cycles independently of the target).
  const status = STATUS_MIX[Math.floor(j / TARGETS.length) % STATUS_MIX.length]!;
  // A deterministic spread over the history window, not in seeding order: later batches
  // interleave with earlier ones in every index, as a real history would.
  const createdAt = now - ((i * 2_654_435_761) % HISTORY_MS);
  const startedAt = createdAt + 40;
  const durationMs = 1_000 + (i % 90_000);
  const jobId = `run-${target.rebuild}-${i.toString(36)}`;
  const hex = (i * 2_654_435_761).toString(16).padStart(16, "0");
  return {
    id: runIdOf(jobId, 1),
    jobId,
    attempt: 1,
    rebuild: target.rebuild,
    tenant: target.tenant,
    version: `v${(i % 500).toString(36)}-${hex.slice(0, 8)}`,
    status,
    reason: status === "skipped" ? "already-rebuilt" : status === "failed" ? "step pack exited with code 1" : null,
    trigger: i % 3 === 0 ? "schedule" : "api",
    workerId: `bench-host-${1000 + (i % 4)}-ab12`,
    host: "bench-host",
    createdAt,
    startedAt,
    finishedAt: startedAt + durationMs,
    durationMs,
    fence: 1 + Math.floor(i / TARGETS.length),
    buildHash: status === "rebuilt" ? hex.repeat(4) : null,
    idempotencyKey: hex.repeat(4),
    progress: 1,
    steps: [
      { name: "prepare", status: "done", startedAt, finishedAt: startedAt + 200 },
      {
        name: "work",
        status: status === "failed" ? "failed" : "done",
        startedAt: startedAt + 200,
        finishedAt: startedAt + durationMs,
      },
    ],
  };
}
