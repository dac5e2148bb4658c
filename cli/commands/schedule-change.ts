/**
 * `claimwatch pause|resume <rebuild> [--tenant T] --reason R`: the rebuild page's Pause / Resume
 * schedule (lib/operations/schedule via lib/api/operations, as `POST /api/rebuilds/{name}/schedule`).
 * Without --tenant, a rebuild with tenants means every tenant's schedule. changeSchedule audits
 * what it did; the refusals before it (unknown rebuild or tenant, no schedule, a bad reason) are
 * audited here, once, and name the valid choices.
 */
import { describeZodError } from "../../lib/api/errors";
import { auditRefused } from "../../lib/api/handler";
import { changeScheduleAsOperator, scheduleBody } from "../../lib/api/operations";
import { rebuildLabel, table } from "../../lib/cli/format";
import { noScheduleProblem, tenantProblem, unknownRebuildProblem } from "../../lib/rebuilds/definitions";
import { EXIT, usageError } from "../outcome";
import { auditingRefusals, connect, loadSetup, operatorActor } from "../session";
import type { CommandSpec } from "./spec";

const OUTCOMES: Record<string, string> = {
  paused: "paused: nothing is enqueued until it is resumed",
  "already-paused": "was paused already",
  resumed: "resumed: the next tick is queued",
  "not-paused": "was not paused (scheduled as before)",
};

export function scheduleCommand(action: "pause" | "resume"): CommandSpec {
  const auditAction = action === "pause" ? "pause-schedule" : "resume-schedule";
  return {
    usage: `${action} <rebuild>`,
    summary:
      action === "pause"
        ? "pause a rebuild's schedule (one tenant, or without --tenant all of them): nothing is enqueued, and its ticks do not count as missed, until `resume`; survives restarts; audited"
        : "resume a paused schedule (one tenant, or without --tenant all of them); the next tick is queued; audited",
    options(command) {
      command
        .option("--tenant <tenant>", "only this tenant's schedule (default: every tenant's)")
        .requiredOption("--reason <text>", "why, for the audit log (at least 3 characters)");
    },
    async run([rebuild], options) {
      const setup = loadSetup();
      const context = await connect(setup);
      try {
        const tenant = options.tenant as string | undefined;
        const detail = { rebuild, tenant: tenant ?? null };
        const actor = await operatorActor(context, auditAction, detail);
        const refuse = async (problem: string): Promise<never> => {
          await auditRefused(context, auditAction, actor, problem, { ...detail, via: "cli" });
          throw usageError(problem);
        };
        const definition = setup.definitions.rebuilds.get(rebuild!);
        if (!definition) return await refuse(unknownRebuildProblem(setup.definitions, rebuild!));
        if (!definition.schedule) return await refuse(noScheduleProblem(setup.definitions, rebuild!));
        // Without a tenant, a rebuild with tenants means all of them (as the API has it).
        if (tenant !== undefined || !definition.tenants) {
          const problem = tenantProblem(definition, tenant);
          if (problem) return await refuse(problem);
        }
        const body = scheduleBody.safeParse({ action, reason: options.reason, ...(tenant ? { tenant } : {}) });
        if (!body.success) return await refuse(describeZodError(body.error));

        const result = await auditingRefusals(context, auditAction, actor, detail, () =>
          changeScheduleAsOperator(context, rebuild!, body.data, actor),
        );
        const done = action === "pause" ? "Paused" : "Resumed";
        const which = tenant ? `${rebuild}/${tenant}` : definition.tenants ? `${rebuild} (every tenant)` : rebuild;
        return {
          exitCode: EXIT.ok,
          json: { rebuild, tenant: tenant ?? null, action, ...result },
          human: [
            result.schedules.some((s) => s.outcome === "paused" || s.outcome === "resumed")
              ? `${done} the schedule of ${which} (${actor}; audit entry ${result.auditId}).`
              : `Nothing changed: ${action === "pause" ? `the schedule of ${which} was paused already` : `the schedule of ${which} was not paused`} (audit entry ${result.auditId}).`,
            ...table(
              ["SCHEDULE", "REBUILD", "OUTCOME"],
              result.schedules.map((s) => [
                s.schedulerId,
                rebuildLabel(rebuild!, s.tenant),
                OUTCOMES[s.outcome] ?? s.outcome,
              ]),
            ),
            ...(action === "pause"
              ? [`Resume it with \`claimwatch resume ${rebuild}${tenant ? ` --tenant ${tenant}` : ""} --reason …\`.`]
              : []),
          ],
        };
      } finally {
        await context.close();
      }
    },
  };
}
