/**
 * `claimwatch retry <run> --reason R`: the dashboard's Retry (lib/operations/retry via
 * lib/api/operations, as `POST /api/runs/{id}/retry`): a new job of the run's rebuild, tenant and
 * version, forced, linked back to the run. Audited by retryRun; an unknown run or a bad reason
 * (thrown before retryRun audits) is audited here, once.
 */
import { describeZodError } from "../../lib/api/errors";
import { auditRefused } from "../../lib/api/handler";
import { retryAsOperator, retryBody } from "../../lib/api/operations";
import { ApiError } from "../../lib/http/errors";
import { oneLine } from "../../lib/rebuilds/definitions";
import { RETRYABLE_STATUSES } from "../../lib/runs/transitions";
import { CliFailure, EXIT, refused, usageError } from "../outcome";
import { auditingRefusals, connect, loadSetup, operatorActor } from "../session";
import type { CommandSpec } from "./spec";

/** "failed, aborted or cancelled". */
const listed = (words: readonly string[]) =>
  words.length > 1 ? `${words.slice(0, -1).join(", ")} or ${words.at(-1)}` : (words[0] ?? "");

export const retry: CommandSpec = {
  usage: "retry <run>",
  summary: `retry a ${listed(RETRYABLE_STATUSES)} run as a new job (same rebuild, tenant and version, forced); audited`,
  options(command) {
    command.requiredOption("--reason <text>", "why, for the audit log (at least 3 characters)");
  },
  async run([runId], options) {
    const context = await connect(loadSetup());
    try {
      const actor = await operatorActor(context, "retry", { runId });
      const body = retryBody.safeParse({ reason: options.reason });
      if (!body.success) {
        const problem = describeZodError(body.error);
        await auditRefused(context, "retry", actor, problem, { runId, via: "cli" });
        throw usageError(problem);
      }
      const unknownRun = () =>
        new CliFailure(
          EXIT.usage,
          "not-found",
          `no run '${oneLine(runId!).slice(0, 200)}'; a run id looks like run-<uuid>-a1, as \`claimwatch runs\` lists them`,
        );
      let result;
      try {
        result = await auditingRefusals(context, "retry", actor, { runId }, () =>
          retryAsOperator(context, runId!, body.data, actor),
        );
      } catch (error) {
        if (error instanceof ApiError && error.status === 404) throw unknownRun();
        throw error;
      }
      switch (result.status) {
        case "queued":
        case "deduplicated":
          return {
            exitCode: EXIT.ok,
            json: result,
            human: [
              `${result.status === "queued" ? "Queued" : "Already waiting:"} job ${result.jobId}, a retry of run ${runId} (${actor}; audit entry ${result.auditId}).`,
            ],
          };
        case "not-retryable":
          return refused(
            "not-retryable",
            `not retried: run ${runId} is ${result.runStatus}; only ${listed(RETRYABLE_STATUSES)} runs are retried (audit entry ${result.auditId})`,
            result,
          );
        case "job-went-on":
          return refused(
            "job-went-on",
            `not retried: run ${runId}'s job went on: its next attempt ${result.laterRunId} is ${result.laterStatus === "trimmed" ? "no longer in the run history (trimmed by retention)" : result.laterStatus} (retry the job's last attempt if it did not rebuild; audit entry ${result.auditId})`,
            result,
          );
        case "job-pending":
          return refused(
            "job-pending",
            `not retried: run ${runId}'s job ${result.queuedJobId} is still in the queue (${result.jobState}): the queue runs it again; retry it once it has ended, if it did not rebuild (audit entry ${result.auditId})`,
            result,
          );
        case "retry-in-progress":
          return refused(
            "retry-in-progress",
            `not retried: another Retry of run ${runId}'s job is being queued at this moment; look again in a moment (audit entry ${result.auditId})`,
            result,
          );
        case "already-retried":
          return refused(
            "already-retried",
            result.viaRunId
              ? `not retried: run ${runId}'s job was retried already, from its run ${result.viaRunId}, as job ${result.jobId}, which is ${result.jobState}; follow that one (audit entry ${result.auditId})`
              : `not retried: run ${runId} was retried already as job ${result.jobId}, which is ${result.jobState}; follow that one (audit entry ${result.auditId})`,
            result,
          );
        case "unknown-rebuild":
        case "request-id-reused":
        case "request-cancelled":
          return refused(result.status, `not retried: ${result.message} (audit entry ${result.auditId})`, result);
        case "not-replicated":
          return refused("not-replicated", `${result.message} (audit entry ${result.auditId})`, result);
        case "not-found": // not returned: retryAsOperator throws the 404 (audited above)
          throw unknownRun();
      }
    } finally {
      await context.close();
    }
  },
};
