/** Rebuild definitions with their live state, "Rebuild now", and what a run would do now. */
import { z } from "zod";
import { appendAudit } from "../audit";
import { claimName, readClaim, readClaimsByName, readSkipsMany } from "../claims";
import { listChangedBuilds } from "../rebuilds/build-integrity";
import { outputDirOf, tenantProblem, tenantsOf, type RebuildDefinition } from "../rebuilds/definitions";
import { outputClaimProblem } from "../rebuilds/output-claim";
import { readSchedulePauses, tickingSchedules, type SchedulePause } from "../rebuilds/schedules";
import { holderJobState, schedulerIdOf } from "../rebuilds/queue";
import { nextTickAfter } from "../rebuilds/schedule-times";
import { REQUEST_ID_PATTERN, triggerRebuild } from "../rebuilds/trigger";
import { hashInputs, idempotencyKey, InputHashCache, VERSION_PATTERN } from "../rebuilds/version";
import { rebuiltByNow } from "../rebuilds/rebuilt-by-now";
import { decideRun } from "../rebuilds/decide";
import { listRunSummariesMany } from "../runs/list";
import { searchRebuildRows, type RebuildRow } from "../rebuilds/search";
import { limitParam, reasonText, searchParam } from "./input";
import { readRunFinishedAt } from "../runs/records";
import type { RunRecord } from "../runs/types";
import type { WebContext } from "../web/context";
import { formatAbsolute } from "../ui/format";
import { listLiveWorkers, liveWorkerIdSet, type WorkerStatus } from "../workers/heartbeat";
import { declaredField, UNDECLARED_DEFER_MS, UNDECLARED_PICKUPS } from "../rebuilds/declared";
import { toApiClaim, type ApiClaim } from "./claims";
import { ApiError, badRequest, notFound } from "./errors";
import { checkTenantField, rebuildOfUrl } from "./rebuild-input";
import { NAME_PATTERN as NAME } from "../names";

export interface ApiRebuild {
  name: string;
  tenant: string | null;
  output: string;
  /** The output's claim name (held or not): its trail is `/api/claims/trail?name=`. */
  claimName: string;
  /**
   * The schedule; `paused` when an operator paused it (nothing is enqueued; `nextRunAt` is when
   * it would run), with who, why and when.
   */
  schedule: { cron: string; tz: string; nextRunAt: string; paused: SchedulePause | null } | null;
  /**
   * The last run that *started* (running or finished; not a skip that came in meanwhile, not a
   * queued job): the newest `startedAt` among the recent runs.
   */
  lastRun: Pick<RunRecord, "id" | "status" | "reason" | "createdAt" | "startedAt" | "finishedAt" | "durationMs"> | null;
  /** The last runs, oldest first, for the runs strip. */
  recentRuns: Pick<RunRecord, "id" | "status" | "createdAt" | "startedAt" | "durationMs">[];
  consecutiveSkips: number;
  claim: ApiClaim | null;
  /**
   * How many tenants the rebuild has (null: none). Not the list: a page of 50 rows of a rebuild
   * with 10k tenants would carry it 50 times; the rebuild's page has it once (`definition.tenants`).
   */
  tenantCount: number | null;
  /** Published builds of this output found changed on disk (build-integrity.ts); usually empty. */
  /** Builds moved aside or found changed (build-integrity.ts): `unsynced` when the disk lost a write. */
  changedBuilds: { kind: "changed" | "unsynced" | "missing"; path: string; foundAt: number; foundBy: string }[];
}

/** The next tick of a schedule (its cron and time zone) after `from`, ISO. */
export function nextRunAt(schedule: { cron: string; tz: string }, from = new Date(Date.now())): string {
  return new Date(nextTickAfter(schedule, from.getTime())).toISOString();
}

/** Largest page of `GET /api/rebuilds`. */
export const MAX_REBUILDS_PAGE = 200;

export const rebuildsQuery = z.strictObject({
  /** Rows whose `rebuild/tenant` contains this, case-insensitive (lib/rebuilds/search.ts). */
  q: searchParam(),
  limit: limitParam(MAX_REBUILDS_PAGE, 50),
  /** Where the previous page ended: the number of matching rows before this page. */
  cursor: z
    .string()
    .regex(/^\d{1,9}$/, "must be a cursor from a previous page")
    .transform(Number)
    .optional(),
});

export interface ApiRebuildPage {
  rebuilds: ApiRebuild[];
  /** Cursor of the next page, or `null` at the end. */
  nextCursor: string | null;
  /** Rows matching the search (all rows without one). */
  total: number;
}

/**
 * One page of the rebuild×tenant rows, searched by name in memory (the definitions), then the
 * page's live state read in a fixed number of pipelines: O(page) Redis work however many rows
 * the definitions have. The cursor is an offset: the rows are fixed while the process runs.
 */
export async function getRebuildsPage(
  context: WebContext,
  query: z.output<typeof rebuildsQuery>,
): Promise<ApiRebuildPage> {
  const rows = searchRebuildRows(context.definitions, query.q);
  const offset = query.cursor ?? 0;
  const page = rows.slice(offset, offset + query.limit);
  const end = offset + page.length;
  return {
    rebuilds: await describeRows(context, page),
    nextCursor: end < rows.length ? String(end) : null,
    total: rows.length,
  };
}

/** The rows of one rebuild (or its one tenant), the first `limit`, for the rebuild's page. */
export async function getRebuilds(
  context: WebContext,
  only: { rebuild: string; tenant?: string },
  limit = Infinity,
): Promise<ApiRebuild[]> {
  const definition = context.definitions.rebuilds.get(only.rebuild);
  if (!definition) return [];
  const rows = tenantsOf(definition)
    .filter((tenant) => !only.tenant || tenant === only.tenant)
    .slice(0, limit)
    .map((tenant) => ({ definition, tenant }));
  return describeRows(context, rows);
}

/**
 * The live state of some rows: skips, claims and recent runs each in one pipeline for all rows
 * (not round trips per row), plus the two small hashes of pauses and changed builds.
 */
async function describeRows(
  context: WebContext,
  rows: readonly Pick<RebuildRow, "definition" | "tenant">[],
): Promise<ApiRebuild[]> {
  const { connections } = context;
  const entries = rows.map(({ definition, tenant }) => ({
    definition,
    tenant,
    name: claimName(definition.claimPath, tenant),
  }));
  const names = entries.map((e) => e.name);
  // Skips outlive claims, so they are read for every name; claims in one pipeline for all.
  const [skips, claims, changed, pauses, recentRuns, ticking] = await Promise.all([
    readSkipsMany(connections.claims, connections.keys, names),
    // With the live workers, as the Claims page reads them: a holder that stopped beating is stale.
    liveWorkerIdSet(connections.main, connections.keys).then((liveWorkerIds) =>
      readClaimsByName(connections.claims, connections.keys, names, { liveWorkerIds }),
    ),
    listChangedBuilds(connections.main, connections.keys),
    readSchedulePauses(connections.main, connections.keys),
    listRunSummariesMany(
      connections.main,
      connections.keys,
      entries.map(({ definition, tenant }) => ({ rebuild: definition.name, ...(tenant ? { tenant } : {}) })),
      30,
    ),
    // As the workers set the schedules up (a file edited since this server read it is not what ticks).
    tickingSchedules(context.queue, connections.main, connections.keys, context.definitions),
  ]);
  const tickingById = new Map(ticking.schedules.map((s) => [s.schedulerId, s]));
  return entries.map(({ definition, tenant, name }, i): ApiRebuild => {
    const claim = claims.get(name);
    const recent = recentRuns[i]!;
    const last = lastStarted(recent);
    const schedulerId = schedulerIdOf(definition.name, tenant);
    const paused = pauses.get(schedulerId) ?? null;
    // A paused schedule has no scheduler: shown as this server's definitions say.
    const timing =
      tickingById.get(schedulerId) ??
      (definition.schedule && (paused || !ticking.definitionsDiffer) ? definition.schedule : null);
    return {
      name: definition.name,
      tenant: tenant ?? null,
      output: definition.output,
      claimName: name,
      schedule: timing ? { cron: timing.cron, tz: timing.tz, nextRunAt: nextRunAt(timing), paused } : null,
      lastRun: last
        ? {
            id: last.id,
            status: last.status,
            reason: last.reason,
            createdAt: last.createdAt,
            startedAt: last.startedAt,
            finishedAt: last.finishedAt,
            durationMs: last.durationMs,
          }
        : null,
      recentRuns: recent
        .map((r) => ({
          id: r.id,
          status: r.status,
          createdAt: r.createdAt,
          startedAt: r.startedAt,
          durationMs: r.durationMs,
        }))
        .reverse(),
      consecutiveSkips: skips.get(name) ?? 0,
      claim: claim ? toApiClaim(claim) : null,
      tenantCount: definition.tenants?.length ?? null,
      changedBuilds: changed
        .filter((b) => b.rebuild === definition.name && b.tenant === (tenant ?? null))
        .map(({ kind, path, foundAt, foundBy }) => ({ kind: kind ?? "changed", path, foundAt, foundBy })),
    };
  });
}

/**
 * Statuses of a run that did not start work: a skip decided at once, a job still waiting, or an
 * attempt deferred behind another version's claim (it started nothing either).
 */
const NOT_STARTED = new Set<RunRecord["status"]>(["queued", "skipped", "deferred"]);

export function lastStarted<T extends Pick<RunRecord, "status" | "startedAt">>(runs: T[]): T | null {
  let best: T | null = null;
  for (const run of runs) {
    if (NOT_STARTED.has(run.status) || !run.startedAt) continue;
    if (!best || run.startedAt > best.startedAt!) best = run;
  }
  return best;
}

export const triggerBody = z.strictObject({
  tenant: z.string().regex(NAME, "must be a tenant name").optional(),
  version: z.string().regex(VERSION_PATTERN, "must be 1-128 letters, digits or . _ : + -").optional(),
  force: z.boolean().optional(),
  reason: reasonText().optional(),
  /** One id per "Rebuild now" preview: the same id submitted twice queues one job. */
  requestId: z.string().regex(REQUEST_ID_PATTERN, "must be 8-64 letters, digits, _ or -").optional(),
});

/** The rebuild the URL names (404 when unknown) and the tenant a body or query gives for it (400 when it does not fit). */
function rebuildAndTenant(context: WebContext, name: string, tenant: string | undefined): RebuildDefinition {
  const definition = rebuildOfUrl(context.definitions, name);
  checkTenantField(definition, tenant);
  return definition;
}

export async function triggerAsOperator(
  context: WebContext,
  name: string,
  body: z.output<typeof triggerBody>,
  actor: string,
): Promise<{ jobId: string; status: "queued" | "deduplicated" }> {
  rebuildAndTenant(context, name, body.tenant);
  const { connections } = context;
  const result = await triggerRebuild(context.queue, connections.main, connections.keys, context.definitions, name, {
    tenant: body.tenant,
    version: body.version,
    force: body.force ?? false,
    trigger: "manual",
    requestedBy: actor,
    ...(body.requestId ? { requestId: body.requestId } : {}),
    replicas: context.config.triggerReplicas,
  });
  if (result.status === "invalid-version") throw badRequest(`version: ${result.message}`);
  if (result.status === "invalid-request-id") throw badRequest(`requestId: ${result.message}`);
  if (result.status === "request-id-reused" || result.status === "request-cancelled")
    throw new ApiError(409, result.status, result.message);
  if (result.status === "unknown-rebuild") throw notFound(result.message);
  if (result.status === "unknown-tenant") throw badRequest(`tenant: ${result.message}`);
  await appendAudit(connections.main, connections.keys, {
    actor,
    action: "trigger",
    reason: body.reason || "Rebuild now",
    result: "done",
    detail: {
      rebuild: name,
      tenant: body.tenant ?? null,
      version: body.version ?? null,
      force: body.force ?? false,
      jobId: result.jobId,
      status: result.status,
    },
  });
  // The job is on the primary, which may still run it; the caller is told to send it again.
  if (result.status === "not-replicated") throw new ApiError(503, "not-replicated", result.message);
  return { jobId: result.jobId, status: result.status };
}

export const previewQuery = z.strictObject({
  tenant: z.string().regex(NAME, "must be a tenant name").optional(),
  version: z.string().regex(VERSION_PATTERN, "must be 1-128 letters, digits or . _ : + -").optional(),
  force: z.enum(["true", "false"]).optional(),
});

export type RunPreview = PreviewOutcome & {
  /**
   * Workers with a live heartbeat now (null: not known). With none, the job waits in the queue
   * until one starts, whatever the outcome: said by the dashboard and the CLI's `trigger`.
   */
  workersLive: number | null;
};

type PreviewOutcome =
  | { outcome: "runs"; version: string }
  /**
   * Live workers there are, but none declares the rebuild (and tenant): their definitions files
   * lack it (a deploy under way). The job waits for one that does, then fails (run-rebuild.ts
   * `undeclaredTarget`).
   */
  | { outcome: "waits-for-worker"; version: string; message: string }
  /** The worker would fail the run for good (its output's claim file names another claim: output-claim.ts). */
  | { outcome: "fails"; version: string; message: string }
  | { outcome: "skip"; reason: "claim-held"; version: string; heldBy: string; pttlMs: number; message: string }
  | { outcome: "defer"; version: string; heldBy: string; pttlMs: number; message: string }
  | {
      outcome: "skip";
      reason: "already-rebuilt";
      version: string;
      runId: string;
      rebuiltAt: number | null;
      message: string;
    };

/** Input hashes of the preview, which the open "Rebuild now" panel asks for every 2 s. */
const previewInputHashes = new InputHashCache();
/** How long the preview reads inputs before it answers without them (a huge input, a hung mount). */
export const PREVIEW_INPUTS_MS = 3_000;

/**
 * What "Rebuild now" would do right now: run, skip (and why), wait for another version, or fail
 * (why); and whether a worker is live to do it.
 */
export async function previewRun(
  context: WebContext,
  name: string,
  query: z.output<typeof previewQuery>,
): Promise<RunPreview> {
  const { main, keys } = context.connections;
  const [outcome, workers] = await Promise.all([
    previewOutcome(context, name, query),
    listLiveWorkers(main, keys).catch(() => null),
  ]);
  // Only a run that would build waits for a worker: a skip stays a skip (review helper-184).
  const waits = outcome.outcome === "runs" && workers ? undeclaredByLiveWorkers(workers, name, query.tenant) : null;
  return {
    ...(waits ? { outcome: "waits-for-worker", version: outcome.version, message: waits } : outcome),
    workersLive: workers?.length ?? null,
  };
}

/**
 * What a job for `rebuild` (and `tenant`) meets when every live worker says what its definitions
 * declare and none declares it: each worker defers it, and it fails after UNDECLARED_PICKUPS
 * pickups (black-box helper-180: the preview said "would build"). Null when some live worker
 * declares it, says nothing (an earlier version), or none is live (said by `workersLive`).
 */
function undeclaredByLiveWorkers(workers: WorkerStatus[], rebuild: string, tenant: string | undefined): string | null {
  if (workers.length === 0 || workers.some((worker) => !worker.declares)) return null;
  const field = declaredField(rebuild, tenant);
  if (workers.some((worker) => worker.declares!.includes(field))) return null;
  const what = tenant ? `rebuild '${rebuild}' for tenant '${tenant}'` : `rebuild '${rebuild}'`;
  const minutes = Math.round((UNDECLARED_DEFER_MS * UNDECLARED_PICKUPS) / 60_000);
  return `would wait: no live worker declares ${what} (their definitions files lack it: a deploy under way?); the job waits for a worker that does, up to ${UNDECLARED_PICKUPS} pickups (about ${minutes} min), then fails`;
}

async function previewOutcome(
  context: WebContext,
  name: string,
  query: z.output<typeof previewQuery>,
): Promise<PreviewOutcome> {
  const definition = rebuildAndTenant(context, name, query.tenant);
  const { connections } = context;
  let version = query.version;
  if (!version) {
    const signal = AbortSignal.timeout(PREVIEW_INPUTS_MS);
    try {
      version = await hashInputs(definition.inputPaths, { cache: previewInputHashes, signal });
    } catch {
      throw badRequest(
        signal.aborted
          ? `version: the inputs were not read within ${PREVIEW_INPUTS_MS / 1000} s here; give a version`
          : "version: the inputs cannot be read here; give a version",
      );
    }
  }
  // The worker's decision on what it would see now (decideRun), read in one round trip each (a
  // rebuilt mark of an earlier incarnation of the main Redis: two, rebuilt-by-now.ts).
  const force = query.force === "true";
  const claimOfRun = claimName(definition.claimPath, query.tenant);
  const [rebuiltBy, claim] = await Promise.all([
    force
      ? Promise.resolve(null)
      : rebuiltByNow(connections, {
          rebuild: name,
          tenant: query.tenant,
          idempotencyKey: idempotencyKey(name, query.tenant, version),
          claim: claimOfRun,
          outputDir: outputDirOf(definition, query.tenant),
        }),
    readClaim(connections.claims, connections.keys, claimOfRun),
  ]);
  // The worker's rule: a same-version holder carries the request only while its attempt is worked
  // and its job is not being cancelled.
  const state =
    claim && claim.holder.version === version
      ? await holderJobState(connections.main, connections.keys, claim.holder)
      : { worked: true, cancelling: false };
  const decision = decideRun({
    version,
    force,
    rebuiltBy,
    claim: claim && { ...claim, jobWorked: state.worked, cancelling: state.cancelling },
  });
  switch (decision.action) {
    case "skip": {
      if (decision.reason === "already-rebuilt") {
        const at = await readRunFinishedAt(connections.main, connections.keys, decision.rebuiltBy);
        return {
          outcome: "skip",
          reason: "already-rebuilt",
          version,
          runId: decision.rebuiltBy,
          rebuiltAt: at,
          message: `would be skipped: already rebuilt${at ? ` at ${formatAbsolute(at, "utc")}` : ""} (use force to rebuild anyway)`,
        };
      }
      return {
        outcome: "skip",
        reason: "claim-held",
        version,
        heldBy: decision.heldBy,
        pttlMs: decision.pttlMs,
        message: `would be skipped: held by ${decision.heldBy}, ${seconds(decision.pttlMs)} s left`,
      };
    }
    case "defer":
      return {
        outcome: "defer",
        version,
        heldBy: decision.heldBy,
        pttlMs: decision.pttlMs,
        message: decision.cancelling
          ? `would wait: ${decision.heldBy} holds it for version ${decision.heldVersion ?? "?"}, but its job is being cancelled: this request builds once it has stopped (${seconds(decision.pttlMs)} s left)`
          : `would wait: ${decision.heldBy} is building version ${decision.heldVersion ?? "?"} (${seconds(decision.pttlMs)} s left)`,
      };
    case "take-over": // a new job never shares an id with the holder
    case "superseded":
    case "build": {
      // The worker's first check before its claim: the output is this claim's directory.
      const problem = await outputClaimProblem(outputDirOf(definition, query.tenant), claimOfRun);
      if (problem) return { outcome: "fails", version, message: `would fail: ${problem}` };
      return { outcome: "runs", version };
    }
  }
}

const seconds = (ms: number) => Math.max(0, Math.round(ms / 1000));

/** What a rebuild is, as its page summarises it (durations in ms). */
export interface ApiRebuildDefinition {
  name: string;
  output: string;
  outputPath: string;
  inputs: string[];
  tenants: string[] | null;
  schedule: { cron: string; tz: string } | null;
  claim: { ttlMs: number; refreshEveryMs: number };
  timeLimitMs: number;
  retries: { attempts: number; backoffMs: number; maxBackoffMs: number };
  idempotencyTtlMs: number;
  steps: {
    name: string;
    kind: "run" | "tiles";
    /** The argv (run) or the tiles input, layer and zooms. */
    detail: string;
    killGraceMs: number | null;
    limits: { memory?: number; pids?: number };
  }[];
}

/** Tenants whose state a rebuild's page shows at once (each also polls its claim trail). */
export const MAX_DETAIL_TENANTS = 20;

export interface ApiRebuildDetail {
  definition: ApiRebuildDefinition;
  /**
   * One per tenant (one for a rebuild without tenants), or the one tenant asked for; at most
   * `MAX_DETAIL_TENANTS`, the first in the definition's order (`entriesTotal` says how many exist).
   */
  entries: ApiRebuild[];
  entriesTotal: number;
}

export const rebuildDetailQuery = z.strictObject({
  tenant: z.string().regex(NAME, "must be a tenant name").optional(),
});

/**
 * `GET /api/rebuilds/{name}?tenant=`: as the page's, but the tenant is a query parameter, so one
 * the rebuild does not have is bad input (400), where the page's path names it (404).
 */
export async function getRebuildDetailOfQuery(
  context: WebContext,
  name: string,
  query: z.output<typeof rebuildDetailQuery>,
): Promise<ApiRebuildDetail> {
  if (query.tenant !== undefined) checkTenantField(rebuildOfUrl(context.definitions, name), query.tenant);
  return getRebuildDetail(context, name, query.tenant);
}

/** The rebuild page: the definition and, per tenant, the schedule state, claim and recent runs. */
export async function getRebuildDetail(
  context: WebContext,
  name: string,
  tenant: string | undefined,
): Promise<ApiRebuildDetail> {
  const definition = rebuildOfUrl(context.definitions, name);
  // Here the tenant is the page's path (/rebuilds/{name}/{tenant}): not there, a 404.
  if (tenant !== undefined) {
    const problem = tenantProblem(definition, tenant);
    if (problem) throw notFound(problem);
  }
  return {
    definition: describeDefinition(definition),
    entries: await getRebuilds(context, { rebuild: name, ...(tenant ? { tenant } : {}) }, MAX_DETAIL_TENANTS),
    entriesTotal: tenant ? 1 : tenantsOf(definition).length,
  };
}

function describeDefinition(definition: RebuildDefinition): ApiRebuildDefinition {
  return {
    name: definition.name,
    output: definition.output,
    outputPath: definition.outputPath,
    inputs: definition.inputs,
    tenants: definition.tenants ?? null,
    schedule: definition.schedule ? { cron: definition.schedule.cron, tz: definition.schedule.tz } : null,
    claim: { ttlMs: definition.claim.ttl, refreshEveryMs: definition.claim.refreshEvery },
    timeLimitMs: definition.timeLimit,
    retries: {
      attempts: definition.retries.attempts,
      backoffMs: definition.retries.backoff,
      maxBackoffMs: definition.retries.maxBackoff,
    },
    idempotencyTtlMs: definition.idempotency.ttl,
    steps: definition.steps.map((step) =>
      "run" in step
        ? {
            name: step.name,
            kind: "run" as const,
            detail: step.run.join(" "),
            killGraceMs: step.killGrace,
            limits: step.limits,
          }
        : {
            name: step.name,
            kind: "tiles" as const,
            detail: `${step.tiles.input} → layer ${step.tiles.layer}, zoom ${step.tiles.minZoom}-${step.tiles.maxZoom}`,
            killGraceMs: null,
            limits: {},
          },
    ),
  };
}
