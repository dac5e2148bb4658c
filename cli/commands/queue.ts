/** `claimwatch queue`: jobs waiting, delayed (when and why), active and recently failed; read-only. */
import { rebuildLabel, table, time, orDash } from "../../lib/cli/format";
import { tenantProblem, unknownRebuildProblem } from "../../lib/rebuilds/definitions";
import { listQueueJobs, QUEUE_STATES } from "../../lib/rebuilds/queue-jobs";
import { EXIT, usageError } from "../outcome";
import { connect, loadSetup } from "../session";
import type { CommandSpec } from "./spec";

export const queue: CommandSpec = {
  usage: "queue",
  summary: "jobs waiting, delayed (next attempt and why), active and recently failed, per rebuild/tenant",
  options(command) {
    command
      .option("--rebuild <rebuild>", "only this rebuild's jobs")
      .option("--tenant <tenant>", "only this tenant's (with --rebuild)")
      .option("--limit <n>", "at most this many jobs per state (1-1000)", "50");
  },
  async run(_args, options) {
    const setup = loadSetup();
    const rebuild = options.rebuild as string | undefined;
    const tenant = options.tenant as string | undefined;
    const limit = Number(options.limit);
    if (!/^\d+$/.test(String(options.limit)) || limit < 1 || limit > 1000) {
      throw usageError("--limit: must be a whole number from 1 to 1000");
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
      const listing = await listQueueJobs(context.queue, context.connections.main, context.connections.keys, {
        rebuild,
        tenant,
        limit,
      });
      const counts = QUEUE_STATES.map((state) => `${listing.counts[state]} ${state}`).join(", ");
      const human = [
        `Queue (all rebuilds): ${counts}`,
        ...(listing.jobs.length
          ? table(
              ["STATE", "JOB", "REBUILD", "ATTEMPTS", "QUEUED", "NEXT ATTEMPT", "WHY"],
              listing.jobs.map((job) => [
                job.state,
                job.id,
                rebuildLabel(job.rebuild, job.tenant),
                `${job.attemptsMade}/${job.attempts}`,
                time(job.queuedAt),
                job.nextAttemptAt ? time(job.nextAttemptAt) : "–",
                orDash(job.why),
              ]),
            )
          : ["No jobs match."]),
      ];
      return { exitCode: EXIT.ok, json: listing, human };
    } finally {
      await context.close();
    }
  },
};
