/** Runs as the API and the Runs pages show them. */
import { z } from "zod";
import { limitParam } from "./input";
import { isValidRunCursor, listRuns, type RunPage } from "../runs/list";
import { readRun, readRunLog } from "../runs/records";
import { RUN_ID_PATTERN, RUN_STATUSES, type RunRecord } from "../runs/types";
import type { WebContext } from "../web/context";
import { badRequest, notFound } from "./errors";
import { tenantProblem, unknownRebuildProblem } from "../rebuilds/definitions";
import { NAME_PATTERN as NAME } from "../names";

export const MAX_RUNS_PAGE = 200;

export const runsQuery = z.strictObject({
  rebuild: z.string().regex(NAME, "must be a rebuild name").optional(),
  tenant: z.string().regex(NAME, "must be a tenant name").optional(),
  status: z.enum(RUN_STATUSES, { error: `must be one of ${RUN_STATUSES.join(", ")}` }).optional(),
  jobId: z
    .string()
    .regex(/^[A-Za-z0-9_.:-]{1,200}$/, "must be a job id")
    .optional(),
  limit: limitParam(MAX_RUNS_PAGE, 50),
  cursor: z.string().max(300).refine(isValidRunCursor, "must be a cursor from a previous page").optional(),
});
export type RunsQuery = z.output<typeof runsQuery>;

export async function getRuns(context: WebContext, query: RunsQuery): Promise<RunPage> {
  if (query.tenant && !query.rebuild) throw badRequest("tenant: give the rebuild it belongs to as well");
  if (query.rebuild) {
    const definition = context.definitions.rebuilds.get(query.rebuild);
    if (!definition) throw badRequest(`rebuild: ${unknownRebuildProblem(context.definitions, query.rebuild)}`);
    // A filter may leave out the tenant of a rebuild that has tenants (all of them).
    const problem = query.tenant === undefined ? null : tenantProblem(definition, query.tenant);
    if (problem) throw badRequest(`tenant: ${problem}`);
  }
  const { connections } = context;
  return listRuns(
    connections.main,
    connections.keys,
    { rebuild: query.rebuild, tenant: query.tenant, status: query.status, jobId: query.jobId },
    query.limit,
    query.cursor,
  );
}

export interface RunDetail extends RunRecord {
  log: string[];
}

export async function getRunDetail(context: WebContext, runId: string): Promise<RunDetail> {
  if (!RUN_ID_PATTERN.test(runId)) throw badRequest("id: not a run id");
  const { connections } = context;
  const [run, log] = await Promise.all([
    readRun(connections.main, connections.keys, runId),
    readRunLog(connections.main, connections.keys, runId, 200),
  ]);
  if (!run) throw notFound(`no run ${runId}`);
  return { ...run, log };
}
