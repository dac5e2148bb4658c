/**
 * Operator actions as the API offers them: cancel a job, retry a run, pause/resume a schedule,
 * and the queue view. Each parses its input, calls one lib/operations function and maps the
 * expected outcomes to data (a refusal is 409 with the outcome, not an exception).
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
import { badRequest, notFound } from "./errors";

/** BullMQ job ids as claimwatch makes them (`run-<uuid>`, `repeat:sched.<name>:<ms>`). */
export const JOB_ID_PATTERN = /^[A-Za-z0-9_.:-]{1,200}$/;

const reason = z.string().trim().min(3, "must say why (at least 3 characters)").max(500);

export const cancelBody = z.strictObject({ reason });

export async function cancelAsOperator(
  context: WebContext,
  jobId: string,
  body: z.output<typeof cancelBody>,
  actor: string,
): Promise<CancelResult> {
  if (!JOB_ID_PATTERN.test(jobId)) throw notFound("no such job");
  const { connections } = context;
  return cancelJob(
    { queue: context.queue, main: connections.main, keys: connections.keys },
    { jobId, actor, reason: body.reason },
  );
}

/**
 * 200 removed; 202 cancelling (the worker stops it); 409 nothing to cancel (finished, a scheduled
 * tick) as data; 404 in the error shape (the refusal is audited by cancelJob already, so it is
 * answered here rather than thrown to the route wrapper, which would audit it twice).
 */
export function cancelReply(result: CancelResult): { status: number; body: unknown } {
  switch (result.status) {
    case "removed":
      return { status: 200, body: result };
    case "cancelling":
      return { status: 202, body: result };
    case "not-found":
      return { status: 404, body: { error: { code: "not-found", message: `no job ${result.jobId}` } } };
    default:
      return { status: 409, body: result };
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
    { queue: context.queue, main: connections.main, keys: connections.keys, definitions: context.definitions },
    { runId, actor, reason: body.reason, ...(body.requestId ? { requestId: body.requestId } : {}) },
  );
  if (result.status === "not-found") throw notFound(`no run ${runId}`);
  return result;
}

export const scheduleBody = z.strictObject({
  action: z.enum(["pause", "resume"], { error: "must be pause or resume" }),
  tenant: z.string().regex(NAME, "must be a tenant name").optional(),
  reason,
});

export async function changeScheduleAsOperator(
  context: WebContext,
  rebuild: string,
  body: z.output<typeof scheduleBody>,
  actor: string,
): Promise<Extract<ScheduleChangeResult, { status: "done" }>> {
  if (!NAME.test(rebuild)) throw notFound(`no rebuild named '${rebuild.slice(0, 80)}'`);
  const { connections } = context;
  const result = await changeSchedule(
    { queue: context.queue, main: connections.main, keys: connections.keys, definitions: context.definitions },
    body.action,
    { rebuild, ...(body.tenant ? { tenant: body.tenant } : {}), actor, reason: body.reason },
  );
  if (result.status === "unknown-rebuild" || result.status === "unknown-tenant") throw notFound(result.message);
  if (result.status !== "done") throw badRequest(result.message);
  return result;
}

export const queueQuery = z.strictObject({
  rebuild: z.string().regex(NAME, "must be a rebuild name").optional(),
  tenant: z.string().regex(NAME, "must be a tenant name").optional(),
});

export async function getQueue(context: WebContext, query: z.output<typeof queueQuery>): Promise<QueueView> {
  if (query.tenant && !query.rebuild) throw badRequest("tenant: give the rebuild it belongs to as well");
  if (query.rebuild && !context.definitions.rebuilds.has(query.rebuild)) {
    throw badRequest(`rebuild: no rebuild named '${query.rebuild}'`);
  }
  const { connections } = context;
  return readQueueView(context.queue, connections.main, connections.keys, {
    ...(query.rebuild ? { rebuild: query.rebuild } : {}),
    ...(query.tenant ? { tenant: query.tenant } : {}),
  });
}
