/** Runs as the API and the Runs pages show them. */
import { silentSince } from "../workers/heartbeat";
import { z } from "zod";
import { limitParam, searchParam } from "./input";
import { isValidRunCursor, listRuns, MAX_SEARCHED_REBUILDS, type RunPage } from "../runs/list";
import { searchRebuildNames } from "../rebuilds/search";
import { readRun, readRunLog } from "../runs/records";
import { RUN_ID_PATTERN, RUN_STATUSES, runIdOf, type RunRecord, type RunStatus } from "../runs/types";
import { findForceReleaseOfRun } from "../audit";
import type { WebContext } from "../web/context";
import { badRequest, notFound } from "./errors";
import { checkRebuildFilter } from "./rebuild-input";
import { NAME_PATTERN as NAME } from "../names";
import { readJobRetriedAs, readRetriedAs } from "../operations/retry";

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
  /** Runs of the rebuilds whose name contains this (case-insensitive; lib/rebuilds/search.ts). */
  q: searchParam(),
});
export type RunsQuery = z.output<typeof runsQuery>;

export interface ApiRunPage extends RunPage {
  /**
   * With `q`: how many rebuilds the search matched and how many of them (the first by name,
   * at most `MAX_SEARCHED_REBUILDS`) the runs come from.
   */
  search?: { matched: number; searched: number };
}

export async function getRuns(context: WebContext, query: RunsQuery): Promise<ApiRunPage> {
  if (query.q !== undefined) return searchRuns(context, query as RunsQuery & { q: string });
  checkRebuildFilter(context.definitions, query);
  const { connections } = context;
  return listRuns(
    connections.main,
    connections.keys,
    { rebuild: query.rebuild, tenant: query.tenant, status: query.status, jobId: query.jobId },
    query.limit,
    query.cursor,
  );
}

/** `q`: the runs of every rebuild whose name matches, newest first (one index per rebuild, merged). */
async function searchRuns(context: WebContext, query: RunsQuery & { q: string }): Promise<ApiRunPage> {
  if (query.rebuild) throw badRequest("q: give either q or rebuild, not both");
  if (query.tenant) throw badRequest("tenant: give the rebuild it belongs to instead of q");
  if (query.jobId) throw badRequest("q: give either q or jobId, not both");
  const matched = searchRebuildNames(context.definitions, query.q);
  const rebuilds = matched.slice(0, MAX_SEARCHED_REBUILDS);
  const search = { matched: matched.length, searched: rebuilds.length };
  if (rebuilds.length === 0) return { runs: [], nextCursor: null, search };
  const { connections } = context;
  const page = await listRuns(
    connections.main,
    connections.keys,
    { rebuilds, status: query.status },
    query.limit,
    query.cursor,
  );
  return { ...page, search };
}

export interface RunDetail extends RunRecord {
  log: string[];
  /** The operator's force release that aborted this attempt: its audit entry, who and why. */
  forceRelease: { auditId: string; actor: string; reason: string; at: number } | null;
  /** The same job's next attempt, once it has started (a force release's retry, a backoff's). */
  nextAttempt: { id: string; status: RunStatus } | null;
  /**
   * The job an operator's Retry of this run queued (lib/operations/retry.ts), if any; else the
   * job a Retry of another attempt of its job queued (`viaRunId`: that attempt).
   */
  retriedAs: { jobId: string; viaRunId?: string } | null;
  /** A run in flight whose worker stopped beating: its last beat (Redis clock); else null. */
  workerSilentSince: number | null;
}

/** Final statuses an operator's force release can leave an attempt in (lib/rebuilds/run-rebuild). */
const ENDED_BY_RELEASE: ReadonlySet<RunStatus> = new Set(["deferred", "aborted", "superseded", "cancelled", "skipped"]);

export async function getRunDetail(context: WebContext, runId: string): Promise<RunDetail> {
  // Not a run id at all: no such run, as the retry and cancel routes answer.
  if (!RUN_ID_PATTERN.test(runId)) throw notFound(`no run ${runId.slice(0, 80)}`);
  const { connections } = context;
  const [run, log] = await Promise.all([
    readRun(connections.main, connections.keys, runId),
    readRunLog(connections.main, connections.keys, runId),
  ]);
  if (!run) throw notFound(`no run ${runId}`);
  const inFlight = run.status === "running" || run.status === "queued";
  const [forceRelease, next, workerSilentSince, retriedAs, jobRetriedAs] = await Promise.all([
    run.startedAt !== null && run.finishedAt !== null && ENDED_BY_RELEASE.has(run.status)
      ? findForceReleaseOfRun(connections.main, connections.keys, run.id, run.startedAt - 1_000, run.finishedAt)
      : null,
    readRun(connections.main, connections.keys, runIdOf(run.jobId, run.attempt + 1)),
    inFlight && run.workerId ? silentSince(connections.main, connections.keys, run.workerId) : null,
    readRetriedAs(connections.main, connections.keys, run.id),
    readJobRetriedAs(connections.main, connections.keys, run.jobId),
  ]);
  const viaJob = jobRetriedAs?.runId && jobRetriedAs.runId !== run.id ? jobRetriedAs : null;
  return {
    ...run,
    log,
    forceRelease: forceRelease && {
      auditId: forceRelease.id,
      actor: forceRelease.actor,
      reason: forceRelease.reason,
      at: forceRelease.at,
    },
    nextAttempt: next && { id: next.id, status: next.status },
    retriedAs: retriedAs ? { jobId: retriedAs.jobId } : viaJob && { jobId: viaJob.jobId, viaRunId: viaJob.runId! },
    workerSilentSince,
  };
}
