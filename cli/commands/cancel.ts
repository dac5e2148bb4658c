/**
 * `claimwatch cancel <job-or-run> --reason R`: the dashboard's Cancel (lib/operations/cancel via
 * lib/api/operations, as `POST /api/jobs/{id}/cancel`). A run id (`run-<uuid>-a<N>`, as `runs`
 * shows it) means its job. Waiting jobs are removed; a running one is stopped by its worker and
 * not retried. Audited by cancelJob itself (refusals too); a bad reason is audited here.
 */
import { describeZodError } from "../../lib/api/errors";
import { auditRefused } from "../../lib/api/handler";
import { cancelAsOperator, cancelBody, JOB_ID_PATTERN } from "../../lib/api/operations";
import { readRun } from "../../lib/runs/records";
import { RUN_ID_PATTERN } from "../../lib/runs/types";
import { oneLine } from "../../lib/rebuilds/definitions";
import { EXIT, refused, usageError, type Outcome } from "../outcome";
import { auditingRefusals, connect, loadSetup, operatorActor, type CliContext } from "../session";
import type { CommandSpec } from "./spec";

/**
 * The job a target names: a run id is looked up (its record names its job; scheduler job ids are
 * not recoverable from the run id), else its `-a<N>` is dropped; anything else is a job id.
 */
async function jobIdOf(context: CliContext, target: string): Promise<{ jobId: string; runId: string | null }> {
  if (!RUN_ID_PATTERN.test(target)) return { jobId: target, runId: null };
  const run = await readRun(context.connections.main, context.connections.keys, target);
  return { jobId: run?.jobId || target.replace(/-a\d+$/, ""), runId: target };
}

const notFound = (target: string, extra: Record<string, unknown> = {}): Outcome => {
  const kept = extra.requestKept
    ? "; the cancel request is kept: a worker still running it (a job its Redis lost) stops it"
    : "";
  const message = `no job or run '${oneLine(target).slice(0, 200)}' (unknown, or finished and removed from the queue)${kept}; \`claimwatch queue\` lists the jobs, \`claimwatch runs\` the runs`;
  return { exitCode: EXIT.usage, json: { error: { code: "not-found", message }, ...extra }, human: [], error: message };
};

export const cancel: CommandSpec = {
  usage: "cancel <job-or-run>",
  summary:
    "cancel a job, waiting or running (a run id means its job): a waiting job is removed; a running one is stopped by its worker (SIGTERM, SIGKILL after killGrace), its claim released, and it is not retried; audited",
  options(command) {
    command.requiredOption("--reason <text>", "why, for the audit log (at least 3 characters)");
  },
  async run([target], options) {
    const context = await connect(loadSetup());
    try {
      const actor = await operatorActor(context, "cancel", { target });
      const body = cancelBody.safeParse({ reason: options.reason });
      if (!body.success) {
        const problem = describeZodError(body.error);
        await auditRefused(context, "cancel", actor, problem, { target, via: "cli" });
        throw usageError(problem);
      }
      const { jobId, runId } = await jobIdOf(context, target!);
      if (!JOB_ID_PATTERN.test(jobId)) {
        await auditRefused(context, "cancel", actor, "no such job", {
          target: oneLine(target!).slice(0, 200),
          via: "cli",
        });
        return notFound(target!);
      }
      const result = await auditingRefusals(context, "cancel", actor, { jobId }, () =>
        cancelAsOperator(context, jobId, body.data, actor),
      );
      const asked = runId ? `job ${jobId} (run ${runId})` : `job ${jobId}`;
      // A lost job's request queued again: the job cancelled is that one.
      const named =
        "requeuedFrom" in result && result.requeuedFrom
          ? `job ${result.jobId} (${asked} was lost by the queue's Redis; its request was queued again as this job)`
          : asked;
      switch (result.status) {
        case "removed":
          return {
            exitCode: EXIT.ok,
            json: result,
            human: [
              `Cancelled ${named}: it was waiting; removed from the queue and recorded as run ${result.runId} cancelled (audit entry ${result.auditId}).`,
              ...joinedLine(result.joinedRequests),
            ],
          };
        case "cancelling":
          return {
            exitCode: EXIT.ok,
            json: result,
            human: [
              `Cancelling ${named}: it is running; its worker aborts the steps (SIGTERM, then SIGKILL after killGrace), releases the claim and records ${result.runId ? `run ${result.runId}` : "the run"} cancelled (if that worker is gone, the job's next pickup closes it and records its own attempt cancelled); it is not retried (audit entry ${result.auditId}).`,
              ...joinedLine(result.joinedRequests),
              `Follow it with \`claimwatch runs --limit 5\`.`,
            ],
          };
        case "finished":
          return refused(
            "finished",
            `nothing to cancel: ${named} has ${
              result.lastRun
                ? `ended already (its last run ${result.lastRun.id} is ${result.lastRun.status})`
                : `${result.state === "completed" ? "completed" : "failed"} already`
            } (audit entry ${result.auditId})`,
            result,
          );
        case "scheduled-tick":
          return refused(
            "scheduled-tick",
            `not cancelled: ${named} is a schedule's next tick, not a run yet; pause the schedule instead (\`claimwatch pause <rebuild>\`) (audit entry ${result.auditId})`,
            result,
          );
        case "abandoned":
          return refused(
            "abandoned",
            `nothing runs ${named}: it is gone from the queue (its Redis lost it) and the worker of its run ${result.runId} has no live heartbeat (the sweep closes that run); the cancel request is kept (audit entry ${result.auditId})`,
            result,
          );
        case "not-found":
          return notFound(target!, result);
      }
    } finally {
      await context.close();
    }
  },
};

/** The requests that had joined the cancelled job and end with it, said in a line (none: no line). */
function joinedLine(joined: number | undefined): string[] {
  return joined ? [`${joined} other request(s) for this version had joined this job; they end with it.`] : [];
}
