/**
 * An operator pauses or resumes the schedule of a rebuild: one tenant, or — without a tenant, for
 * a rebuild with tenants — every tenant's. The mechanics (Redis state, BullMQ schedulers, missed
 * ticks) are lib/rebuilds/schedules.ts; this adds the audit and the naming of what was changed.
 */
import type { Queue } from "bullmq";
import type { Redis } from "ioredis";
import { appendAudit } from "../audit/append";
import { publishEvent } from "../events/publish";
import {
  noScheduleProblem,
  tenantProblem,
  tenantsOf,
  unknownRebuildProblem,
  type Definitions,
} from "../rebuilds/definitions";
import { pauseSchedule, resumeSchedule } from "../rebuilds/schedules";
import type { RedisKeys } from "../redis/keys";
import type { ScriptingClient } from "../redis/scripts";

export interface ScheduleDeps {
  queue: Pick<Queue, "upsertJobScheduler" | "removeJobScheduler" | "getJobScheduler" | "getJobState" | "getJobs">;
  main: ScriptingClient & Pick<Redis, "hget" | "hset" | "hdel" | "set">;
  keys: RedisKeys;
  definitions: Definitions;
}

export interface ScheduleChange {
  rebuild: string;
  tenant?: string;
  actor: string;
  reason: string;
}

export type ScheduleChangeResult =
  | {
      status: "done";
      /** Per scheduler: what happened (paused, already-paused, resumed, not-paused). */
      schedules: { schedulerId: string; tenant: string | null; outcome: string }[];
      auditId: string;
    }
  | { status: "unknown-rebuild" | "unknown-tenant" | "not-scheduled"; message: string };

export async function changeSchedule(
  deps: ScheduleDeps,
  action: "pause" | "resume",
  change: ScheduleChange,
): Promise<ScheduleChangeResult> {
  const definition = deps.definitions.rebuilds.get(change.rebuild);
  if (!definition)
    return { status: "unknown-rebuild", message: unknownRebuildProblem(deps.definitions, change.rebuild) };
  if (!definition.schedule) {
    return { status: "not-scheduled", message: noScheduleProblem(deps.definitions, change.rebuild) };
  }
  // Without a tenant, a rebuild with tenants means all of them.
  if (change.tenant !== undefined || !definition.tenants) {
    const problem = tenantProblem(definition, change.tenant);
    if (problem) return { status: "unknown-tenant", message: problem };
  }
  const tenants = change.tenant !== undefined ? [change.tenant] : tenantsOf(definition);
  const schedules: { schedulerId: string; tenant: string | null; outcome: string }[] = [];
  for (const tenant of tenants) {
    if (action === "pause") {
      const result = await pauseSchedule(
        { queue: deps.queue, client: deps.main, keys: deps.keys },
        definition,
        tenant,
        {
          actor: change.actor,
          reason: change.reason,
          at: Date.now(),
        },
      );
      if (result.status !== "not-scheduled")
        schedules.push({ schedulerId: result.schedulerId, tenant: tenant ?? null, outcome: result.status });
    } else {
      const result = await resumeSchedule(
        { queue: deps.queue, client: deps.main, keys: deps.keys, definitions: deps.definitions },
        definition,
        tenant,
      );
      if (result.status !== "not-scheduled")
        schedules.push({ schedulerId: result.schedulerId, tenant: tenant ?? null, outcome: result.status });
    }
  }
  const auditId = await appendAudit(deps.main, deps.keys, {
    actor: change.actor,
    action: action === "pause" ? "pause-schedule" : "resume-schedule",
    reason: change.reason,
    result: "done",
    detail: { rebuild: change.rebuild, tenant: change.tenant ?? null, schedules },
  });
  // Open dashboards show the schedule paused or resumed at once (they do not poll while live).
  await publishEvent(deps.main, deps.keys, {
    type: action === "pause" ? "schedule.paused" : "schedule.resumed",
    rebuild: change.rebuild,
    tenant: change.tenant ?? null,
  });
  return { status: "done", schedules, auditId };
}
