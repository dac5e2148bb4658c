/**
 * `claimwatch queue`: jobs active, waiting, delayed (next attempt and why) and recently failed,
 * per rebuild/tenant — the Queue page's view (lib/operations/queue-view, as `GET /api/queue`).
 * Read-only; `--json` prints the QueueView, with at most --limit jobs of each state.
 */
import { duration, orDash, rebuildLabel, table, time } from "../../lib/cli/format";
import { QUEUE_VIEW_STATES, readQueueView, type QueueEntry, type QueueView } from "../../lib/operations/queue-view";
import { tenantProblem, unknownRebuildProblem } from "../../lib/rebuilds/definitions";
import { EXIT, usageError } from "../outcome";
import { connect, loadSetup } from "../session";
import type { CommandSpec } from "./spec";

/** The dashboard's words for why a job waits (components/queue-table.tsx). */
const WAIT_KIND = { backoff: "backoff", deferred: "deferred", "scheduled-tick": "scheduled", queued: "queued" };

function why(job: QueueEntry): string {
  if (job.state === "failed" || job.state === "cancelled") return orDash(job.failedReason);
  if (job.state === "active") {
    const running = job.lastRun ? `running as ${job.lastRun.id}` : "running";
    return job.cancelRequested ? `${running}; cancel requested by ${job.cancelRequested.actor}` : running;
  }
  return job.waitReason ? `${WAIT_KIND[job.waitReason.kind]}: ${job.waitReason.detail}` : "–";
}

export function nextAttempt(job: Pick<QueueEntry, "nextAttemptAt">, serverTime: number): string {
  if (job.nextAttemptAt === null) return "–";
  // Past it and still waiting: no worker has picked it up (none running, or all busy).
  if (job.nextAttemptAt < serverTime - 1_000)
    return `${time(job.nextAttemptAt)} (overdue by ${duration(serverTime - job.nextAttemptAt)})`;
  return `${time(job.nextAttemptAt)} (in ${duration(Math.max(0, job.nextAttemptAt - serverTime))})`;
}

/** At most `limit` jobs of each state, in the view's order (next to run first; newest failed first). */
export function limitPerState(view: QueueView, limit: number): QueueView {
  const seen = new Map<string, number>();
  const jobs = view.jobs.filter((job) => {
    const n = (seen.get(job.state) ?? 0) + 1;
    seen.set(job.state, n);
    return n <= limit;
  });
  return { ...view, jobs };
}

export const queue: CommandSpec = {
  usage: "queue",
  summary:
    "jobs active, waiting, delayed (next attempt and why: backoff, deferred behind a claim, scheduled tick) and recently failed",
  options(command) {
    command
      .option("--rebuild <rebuild>", "only this rebuild's jobs")
      .option("--tenant <tenant>", "only this tenant's (with --rebuild)")
      .option("--limit <n>", "at most this many jobs of each state (1-200)", "50");
  },
  async run(_args, options) {
    const setup = loadSetup();
    const rebuild = options.rebuild as string | undefined;
    const tenant = options.tenant as string | undefined;
    const limit = Number(options.limit);
    if (!/^\d+$/.test(String(options.limit)) || limit < 1 || limit > 200) {
      throw usageError("--limit: must be a whole number from 1 to 200");
    }
    if (tenant !== undefined && rebuild === undefined)
      throw usageError("--tenant: give the rebuild it belongs to as well");
    if (rebuild !== undefined) {
      const definition = setup.definitions.rebuilds.get(rebuild);
      if (!definition) throw usageError(unknownRebuildProblem(setup.definitions, rebuild));
      const problem = tenant === undefined ? null : tenantProblem(definition, tenant);
      if (problem) throw usageError(problem);
    }
    const context = await connect(setup);
    try {
      const view = limitPerState(
        await readQueueView(context.queue, context.connections.main, context.connections.keys, {
          ...(rebuild ? { rebuild } : {}),
          ...(tenant ? { tenant } : {}),
        }),
        limit,
      );
      // BullMQ's counts (its failed set holds the cancelled jobs too; the rows say which).
      const counts = QUEUE_VIEW_STATES.map(
        (state) => `${view.counts[state]} ${state === "failed" ? "failed or cancelled (kept)" : state}`,
      ).join(", ");
      const human = [
        // The counts are the whole queue's (lib/operations/queue-view); the rows follow the filter.
        rebuild
          ? `Whole queue: ${counts}; below, ${rebuildLabel(rebuild, tenant ?? null)}'s jobs`
          : `Queue (all rebuilds): ${counts}`,
        ...(view.jobs.length
          ? table(
              ["STATE", "JOB", "REBUILD", "FAILED", "QUEUED", "NEXT ATTEMPT", "WHY"],
              view.jobs.map((job) => [
                job.state,
                job.jobId,
                rebuildLabel(job.rebuild, job.tenant),
                // As the Queue page says it: attempts failed of those allowed (a running first attempt is 0 of n).
                job.state === "cancelled" ? "cancelled: not retried" : `${job.attemptsMade} of ${job.attempts}`,
                time(job.createdAt),
                nextAttempt(job, view.serverTime),
                why(job),
              ]),
            )
          : ["No jobs match."]),
      ];
      return { exitCode: EXIT.ok, json: view, human };
    } finally {
      await context.close();
    }
  },
};
