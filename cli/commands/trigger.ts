/**
 * `claimwatch trigger <rebuild>`: the dashboard's "Rebuild now" from a shell. Prints what the
 * worker would do now (the same preview), then queues the job as the operator — audited like the
 * dashboard's. A preview that says the job would be skipped, or would fail (its output is another
 * claim's directory), queues nothing unless --queue-anyway.
 */
import { describeZodError } from "../../lib/api/errors";
import { auditRefused } from "../../lib/api/handler";
import { previewRun, triggerAsOperator, triggerBody, type RunPreview } from "../../lib/api/rebuilds";
import { ApiError } from "../../lib/http/errors";
import { tenantProblem, unknownRebuildProblem } from "../../lib/rebuilds/definitions";
import { EXIT, refused, usageError } from "../outcome";
import { previewVersion } from "../preview-version";
import { connect, loadSetup, operatorActor } from "../session";
import type { CommandSpec } from "./spec";

export function describePreview(preview: RunPreview | { error: string }): string {
  if ("error" in preview) return `Preview: cannot tell what would happen: ${preview.error}`;
  const text =
    preview.outcome === "runs"
      ? `Preview: would build version ${preview.version}`
      : `Preview: ${preview.message} (version ${preview.version})`;
  return preview.workersLive === 0 ? `${text}\n${NO_WORKER}` : text;
}

/** With no worker live, whatever the preview says happens only once one starts. */
const NO_WORKER = "No worker is live now: the job waits in the queue until one starts (claimwatch status).";

export const trigger: CommandSpec = {
  usage: "trigger <rebuild>",
  summary: "queue a rebuild now (prints the preview first); audited",
  options(command) {
    command
      .option("--tenant <tenant>", "the tenant, for a rebuild with tenants")
      .option("--version <version>", "the version to build (default: the hash of its inputs)")
      .option("--force", "rebuild even if this version was already built (never skips the claim)")
      .option("--reason <text>", "why, for the audit log", "claimwatch trigger")
      .option("--queue-anyway", "queue even when the preview says the job would be skipped or fail");
  },
  async run([name], options) {
    const setup = loadSetup();
    const context = await connect(setup);
    try {
      const request = {
        tenant: options.tenant as string | undefined,
        version: options.version as string | undefined,
        force: options.force === true,
        reason: options.reason as string,
      };
      const actor = await operatorActor(context, "trigger", { rebuild: name, via: "cli" });
      const refuse = async (problem: string): Promise<never> => {
        await auditRefused(context, "trigger", actor, problem, {
          rebuild: name,
          tenant: request.tenant ?? null,
          via: "cli",
        });
        throw usageError(problem);
      };
      const definition = setup.definitions.rebuilds.get(name!);
      if (!definition) return await refuse(unknownRebuildProblem(setup.definitions, name!));
      const tenantError = tenantProblem(definition, request.tenant);
      if (tenantError) return await refuse(tenantError);
      const body = triggerBody.safeParse(request);
      if (!body.success) return await refuse(describeZodError(body.error));

      let preview: RunPreview | { error: string };
      // The inputs are read in a child process: a read stuck in the kernel stays there.
      const read = body.data.version ? { version: body.data.version } : await previewVersion(definition.inputPaths);
      if ("error" in read) preview = read;
      else {
        try {
          preview = await previewRun(context, name!, {
            tenant: body.data.tenant,
            version: read.version,
            force: body.data.force ? "true" : "false",
          });
        } catch (error) {
          if (!(error instanceof ApiError)) throw error;
          preview = { error: error.message };
        }
      }
      const shown = describePreview(preview);
      const wouldNotBuild =
        "outcome" in preview && (preview.outcome === "skip" || preview.outcome === "fails") ? preview : null;
      if (wouldNotBuild && options.queueAnyway !== true) {
        const how =
          wouldNotBuild.outcome === "skip" && wouldNotBuild.reason === "already-rebuilt"
            ? "--force to rebuild anyway, or "
            : "";
        // Asked for and not done: audited as refused, like every other refusal of a mutation.
        await auditRefused(context, "trigger", actor, `not queued: ${wouldNotBuild.message}`, {
          rebuild: name,
          tenant: request.tenant ?? null,
          version: wouldNotBuild.version,
          via: "cli",
        });
        // The preview first, on stdout as for a queued job; the refusal follows on stderr.
        return {
          // The dashboard's own hint ("use force …") gives way to the CLI's options.
          ...refused(
            wouldNotBuild.outcome === "skip" ? "would-skip" : "would-fail",
            `not queued: ${wouldNotBuild.message.replace(/ \(use force[^)]*\)$/, "")}; use ${how}--queue-anyway to queue it`,
            {
              preview,
              queued: false,
            },
          ),
          human: [shown],
        };
      }
      const result = await triggerAsOperator(context, name!, body.data, actor);
      const what = result.status === "queued" ? "Queued job" : "Already waiting: job";
      return {
        exitCode: EXIT.ok,
        json: { preview, queued: true, ...result },
        human: [shown, `${what} ${result.jobId} (${actor}; audited).`],
      };
    } finally {
      await context.close();
    }
  },
};
