/**
 * The timeline backfill (lib/runs/timeline-backfill.ts) as the web server starts: one pass in the
 * background on the web context's main connection, once per process.
 */
import { startTimelineBackfill } from "../runs/timeline-backfill";
import { getWebContext } from "./context";

const holder = globalThis as typeof globalThis & { __claimwatchTimelineBackfill?: boolean };

export function startWebTimelineBackfill(): void {
  if (holder.__claimwatchTimelineBackfill) return;
  holder.__claimwatchTimelineBackfill = true;
  const log = (line: string) => process.stdout.write(`[web] ${line}\n`);
  try {
    const { connections, definitions } = getWebContext();
    const retention = { maxPerRebuild: definitions.retention.runs, maxAgeMs: definitions.retention.runAge };
    void startTimelineBackfill(connections.main, connections.keys, { retention, log });
  } catch (error) {
    // No context (a bad environment): the server answers with that problem; a worker backfills.
    log(`timeline backfill not started: ${(error as Error).message}`);
  }
}
