/**
 * Operator actions as the API offers them: cancel a job, retry a run, pause/resume a schedule,
 * and the queue view. Each parses its input, calls one lib/operations function and maps the
 * expected outcomes to data (a refusal is a 409 in the error shape with the outcome beside it,
 * not an exception).
 */
import { z } from "zod";
import { NAME_PATTERN as NAME } from "../names";
import { cancelJob, type CancelResult } from "../operations/cancel";
import { readQueueView, type QueueView } from "../operations/queue-view";
import { retryRun, type RetryResult } from "../operations/retry";
import { changeSchedule, type ScheduleChangeResult } from "../operations/schedule";
import { REQUEST_ID_PATTERN } from "../rebuilds/trigger";
import { RUN_ID_PATTERN } from "../runs/types";
import type { WebContext } from "../web/context";
import { RETRYABLE_STATUSES } from "../runs/transitions";
import { badRequest, notFound, refusal, type Reply } from "./errors";
import { checkRebuildFilter, rebuildOfUrl } from "./rebuild-input";
import { peekJsonBody, reasonText } from "./input";

/** BullMQ job ids as claimwatch makes them (`run-<uuid>`, `repeat:sched.<name>:<ms>`). */
export const JOB_ID_PATTERN = /^[A-Za-z0-9_.:-]{1,200}$/;

const reason = reasonText(3);

export const cancelBody = z.strictObject({ reason });

export async function cancelAsOperator(
  context: WebContext,
  jobId: string,
  body: z.output<typeof cancelBody>,
  actor: string,
): Promise<CancelResult> {
  // Not a job id at all: no such job, named as any unknown id is (quoted, cut to 80 characters).
  if (!JOB_ID_PATTERN.test(jobId)) throw notFound(`no job ${JSON.stringify(jobId.slice(0, 80))}`);
  const { connections } = context;
  return cancelJob(
    { queue: context.queue, main: connections.main, keys: connections.keys },
    { jobId, actor, reason: body.reason },
  );
}

/**
 * 200 removed; 202 cancelling (the worker stops it); 409 nothing to cancel (finished, a scheduled
 * tick); 404 unknown. Refusals are answered here rather than thrown to the route wrapper: cancelJob
 * audited them already, and the wrapper would audit them twice.
 */
export function cancelReply(result: CancelResult): Reply {
  switch (result.status) {
    case "removed":
      return { status: 200, body: result };
    case "cancelling":
      return { status: 202, body: result };
    case "finished": {
      const ended = result.lastRun
        ? `ended already (its last run ${result.lastRun.id} is ${result.lastRun.status})`
        : `${result.state === "completed" ? "completed" : "failed"} already`;
      return refusal(result, `nothing to cancel: job ${result.jobId} has ${ended}`);
    }
    case "scheduled-tick":
      return refusal(
        result,
        `not cancelled: job ${result.jobId} is a schedule's next tick, not a run yet; pause the schedule instead`,
      );
    case "abandoned":
      return refusal(
        result,
        `nothing runs job ${result.jobId}: it is gone from the queue (its Redis lost it) and the worker of its run ${result.runId} has no live heartbeat (the sweep closes that run); the cancel request is kept`,
      );
    case "not-found":
      return {
        status: 404,
        body: {
          error: {
            code: "not-found",
            message: result.requestKept
              ? `no job ${result.jobId} in the queue or the run history; the cancel request is kept: a worker still running it (a job its Redis lost) stops it`
              : `no job ${result.jobId}`,
          },
          ...(result.requestKept ? { requestKept: true } : {}),
        },
      };
  }
}

export const retryBody = z.strictObject({
  reason,
  requestId: z.string().regex(REQUEST_ID_PATTERN, "must be 8-64 letters, digits, _ or -").optional(),
});

export async function retryAsOperator(
  context: WebContext,
  runId: string,
  body: z.output<typeof retryBody>,
  actor: string,
): Promise<RetryResult> {
  if (!RUN_ID_PATTERN.test(runId)) throw notFound(`no run ${runId.slice(0, 80)}`);
  const { connections } = context;
  const result = await retryRun(
    {
      queue: context.queue,
      main: connections.main,
      keys: connections.keys,
      definitions: context.definitions,
      replicas: context.config.triggerReplicas,
    },
    { runId, actor, reason: body.reason, ...(body.requestId ? { requestId: body.requestId } : {}) },
  );
  if (result.status === "not-found") throw notFound(`no run ${runId}`);
  return result;
}

/**
 * 202 queued (or deduplicated: the same request's job); 409 not retryable, retried already
 * (that job still to run), its rebuild is gone, or the request id named another request; 503 queued but not yet on the replicas asked for (send it again).
 */
export function retryReply(result: RetryResult): Reply {
  switch (result.status) {
    case "queued":
    case "deduplicated":
      return { status: 202, body: result };
    case "not-retryable":
      return refusal(
        result,
        `not retried: run ${result.runId} is ${result.runStatus}; only ${listed(RETRYABLE_STATUSES)} runs are retried`,
      );
    case "job-went-on":
      return refusal(
        result,
        `not retried: run ${result.runId}'s job went on: its next attempt ${result.laterRunId} is ${result.laterStatus === "trimmed" ? "no longer in the run history (trimmed by retention)" : result.laterStatus} (retry the job's last attempt if it did not rebuild)`,
      );
    case "job-pending":
      return refusal(
        result,
        `not retried: run ${result.runId}'s job ${result.queuedJobId} is still in the queue (${result.jobState}): the queue runs it again; retry it once it has ended, if it did not rebuild`,
      );
    case "retry-in-progress":
      return refusal(
        result,
        `not retried: another Retry of run ${result.runId}'s job is being queued at this moment; look again in a moment`,
      );
    case "already-retried":
      return refusal(
        result,
        result.viaRunId
          ? `not retried: run ${result.runId}'s job was retried already, from its run ${result.viaRunId}, as job ${result.jobId}, which is ${result.jobState}; follow that one`
          : `not retried: run ${result.runId} was retried already as job ${result.jobId}, which is ${result.jobState}; follow that one`,
      );
    case "unknown-rebuild":
    case "request-id-reused":
    case "request-cancelled":
      return refusal(result, `not retried: ${result.message}`);
    case "not-replicated": // queued on the primary only: a failover now could lose it
      return { status: 503, body: { error: { code: result.status, message: result.message }, ...result } };
    case "not-found": // retryAsOperator throws it (audited by the route wrapper)
      return { status: 404, body: { error: { code: "not-found", message: `no run ${result.runId}` } } };
  }
}

/** `a, b or c`. */
const listed = (items: readonly string[]) =>
  items.length < 2 ? items.join("") : `${items.slice(0, -1).join(", ")} or ${items.at(-1)}`;

export const scheduleBody = z.strictObject({
  action: z.enum(["pause", "resume"], { error: "must be pause or resume" }),
  tenant: z.string().regex(NAME, "must be a tenant name").optional(),
  reason,
});

/** The audit action (and rate-limit count) of a schedule change: its body's `action` (neither: `change-schedule`). */
export async function scheduleActionOf(
  request: Request,
): Promise<"pause-schedule" | "resume-schedule" | "change-schedule"> {
  const body = await peekJsonBody(request);
  const action = typeof body === "object" && body !== null ? (body as { action?: unknown }).action : undefined;
  return action === "resume" ? "resume-schedule" : action === "pause" ? "pause-schedule" : "change-schedule";
}

export async function changeScheduleAsOperator(
  context: WebContext,
  rebuild: string,
  body: z.output<typeof scheduleBody>,
  actor: string,
): Promise<Extract<ScheduleChangeResult, { status: "done" }>> {
  rebuildOfUrl(context.definitions, rebuild);
  const { connections } = context;
  const result = await changeSchedule(
    { queue: context.queue, main: connections.main, keys: connections.keys, definitions: context.definitions },
    body.action,
    { rebuild, ...(body.tenant ? { tenant: body.tenant } : {}), actor, reason: body.reason },
  );
  if (result.status === "unknown-rebuild") throw notFound(result.message);
  if (result.status === "unknown-tenant") throw badRequest(`tenant: ${result.message}`);
  if (result.status !== "done") throw badRequest(result.message);
  return result;
}

export const queueQuery = z.strictObject({
  rebuild: z.string().regex(NAME, "must be a rebuild name").optional(),
  tenant: z.string().regex(NAME, "must be a tenant name").optional(),
});

export async function getQueue(context: WebContext, query: z.output<typeof queueQuery>): Promise<QueueView> {
  checkRebuildFilter(context.definitions, query);
  const { connections } = context;
  return readQueueView(context.queue, connections.main, connections.keys, {
    ...(query.rebuild ? { rebuild: query.rebuild } : {}),
    ...(query.tenant ? { tenant: query.tenant } : {}),
  });
}
