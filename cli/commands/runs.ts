/** `claimwatch runs`: run records, newest first, as the Runs page lists them. */
import { describeZodError } from "../../lib/api/errors";
import { getRuns, runsQuery } from "../../lib/api/runs";
import { orDash, rebuildLabel, table, time } from "../../lib/cli/format";
import { formatRunDuration } from "../../lib/ui/format";
import { EXIT, usageError } from "../outcome";
import { connect, loadSetup } from "../session";
import type { CommandSpec } from "./spec";

export const runs: CommandSpec = {
  usage: "runs",
  summary: "recent runs, newest first",
  options(command) {
    command
      .option("--rebuild <rebuild>", "only this rebuild's runs")
      .option("--tenant <tenant>", "only this tenant's (with --rebuild)")
      .option("--status <status>", "only runs with this status")
      .option("--limit <n>", "at most this many (1-200)", "20");
  },
  async run(_args, options) {
    const query = runsQuery.safeParse({
      rebuild: options.rebuild,
      tenant: options.tenant,
      status: options.status,
      limit: options.limit,
    });
    if (!query.success) throw usageError(describeZodError(query.error));
    const context = await connect(loadSetup());
    try {
      const page = await getRuns(context, query.data);
      const human = page.runs.length
        ? table(
            ["RUN", "REBUILD", "STATUS", "TRIGGER", "STARTED", "DURATION", "REASON"],
            page.runs.map((run) => [
              run.id,
              rebuildLabel(run.rebuild, run.tenant),
              run.status,
              run.trigger,
              time(run.startedAt ?? run.createdAt),
              formatRunDuration(run),
              orDash(run.reason),
            ]),
          )
        : ["No runs match."];
      return { exitCode: EXIT.ok, json: page, human };
    } finally {
      await context.close();
    }
  },
};
