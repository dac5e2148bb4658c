/** Rebuild definitions with their live state, "Rebuild now", and what a run would do now. */
import { CronExpressionParser } from "cron-parser";
import { z } from "zod";
import { appendAudit } from "../audit";
import { claimName, readClaim, readClaimsByName, readSkipsMany } from "../claims";
import { tenantsOf, type RebuildDefinition } from "../rebuilds/definitions";
import { triggerRebuild } from "../rebuilds/trigger";
import { hashInputs, idempotencyKey, InputHashCache, VERSION_PATTERN } from "../rebuilds/version";
import { listRunSummaries } from "../runs/list";
import type { RunRecord } from "../runs/types";
import type { WebContext } from "../web/context";
import { formatAbsolute } from "../ui/format";
import { toApiClaim, type ApiClaim } from "./claims";
import { badRequest, notFound } from "./errors";

export interface ApiRebuild {
  name: string;
  tenant: string | null;
  output: string;
  schedule: { cron: string; tz: string; nextRunAt: string } | null;
  /**
   * The last run that *started* (running or finished; not a skip that came in meanwhile, not a
   * queued job): the newest `startedAt` among the recent runs.
   */
  lastRun: Pick<RunRecord, "id" | "status" | "reason" | "createdAt" | "startedAt" | "finishedAt" | "durationMs"> | null;
  /** The last runs, oldest first, for the runs strip. */
  recentRuns: Pick<RunRecord, "id" | "status" | "createdAt" | "startedAt" | "durationMs">[];
  consecutiveSkips: number;
  claim: ApiClaim | null;
  tenants: string[] | null;
}

export function nextRunAt(definition: RebuildDefinition, from = new Date()): string | null {
  if (!definition.schedule) return null;
  return CronExpressionParser.parse(definition.schedule.cron, { tz: definition.schedule.tz, currentDate: from })
    .next()
    .toDate()
    .toISOString();
}

/** One entry per rebuild and tenant. O(rebuilds × recent runs); independent of history size. */
export async function getRebuilds(context: WebContext): Promise<ApiRebuild[]> {
  const { connections, definitions } = context;
  const entries: { definition: RebuildDefinition; tenant: string | undefined; name: string }[] = [];
  for (const definition of definitions.rebuilds.values()) {
    for (const tenant of tenantsOf(definition)) {
      entries.push({ definition, tenant, name: claimName(definition.outputPath, tenant) });
    }
  }
  const names = entries.map((e) => e.name);
  // Skips outlive claims, so they are read for every name; claims in one pipeline for all.
  const [skips, claims] = await Promise.all([
    readSkipsMany(connections.claims, connections.keys, names),
    readClaimsByName(connections.claims, connections.keys, names),
  ]);
  return Promise.all(
    entries.map(async ({ definition, tenant, name }): Promise<ApiRebuild> => {
      const claim = claims.get(name);
      const recent = await listRunSummaries(
        connections.main,
        connections.keys,
        { rebuild: definition.name, ...(tenant ? { tenant } : {}) },
        30,
      );
      const last = lastStarted(recent);
      return {
        name: definition.name,
        tenant: tenant ?? null,
        output: definition.output,
        schedule: definition.schedule
          ? { cron: definition.schedule.cron, tz: definition.schedule.tz, nextRunAt: nextRunAt(definition)! }
          : null,
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
        tenants: definition.tenants ?? null,
      };
    }),
  );
}

/** Statuses of a run that did not start work: a skip decided at once, or a job still waiting. */
const NOT_STARTED = new Set<RunRecord["status"]>(["queued", "skipped"]);

export function lastStarted<T extends Pick<RunRecord, "status" | "startedAt">>(runs: T[]): T | null {
  let best: T | null = null;
  for (const run of runs) {
    if (NOT_STARTED.has(run.status) || !run.startedAt) continue;
    if (!best || run.startedAt > best.startedAt!) best = run;
  }
  return best;
}

const NAME = /^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$/;

export const triggerBody = z.strictObject({
  tenant: z.string().regex(NAME, "must be a tenant name").optional(),
  version: z.string().regex(VERSION_PATTERN, "must be 1-128 letters, digits or . _ : + -").optional(),
  force: z.boolean().optional(),
  reason: z.string().trim().max(500).optional(),
});

function definitionOr404(context: WebContext, name: string, tenant: string | undefined): RebuildDefinition {
  if (!NAME.test(name)) throw notFound(`no rebuild named '${name.slice(0, 80)}'`);
  const definition = context.definitions.rebuilds.get(name);
  if (!definition) throw notFound(`no rebuild named '${name}'`);
  if (definition.tenants ? !tenant || !definition.tenants.includes(tenant) : tenant !== undefined) {
    throw notFound(
      definition.tenants
        ? `rebuild '${name}' needs a tenant, one of: ${definition.tenants.join(", ")}`
        : `rebuild '${name}' has no tenants`,
    );
  }
  return definition;
}

export async function triggerAsOperator(
  context: WebContext,
  name: string,
  body: z.output<typeof triggerBody>,
  actor: string,
): Promise<{ jobId: string; status: "queued" | "deduplicated" }> {
  definitionOr404(context, name, body.tenant);
  const { connections } = context;
  const result = await triggerRebuild(context.queue, connections.main, connections.keys, context.definitions, name, {
    tenant: body.tenant,
    version: body.version,
    force: body.force ?? false,
    trigger: "manual",
    requestedBy: actor,
  });
  if (result.status === "invalid-version") throw badRequest(`version: ${result.message}`);
  if (result.status === "unknown-rebuild" || result.status === "unknown-tenant") throw notFound(result.message);
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
  return { jobId: result.jobId, status: result.status };
}

export const previewQuery = z.strictObject({
  tenant: z.string().regex(NAME, "must be a tenant name").optional(),
  version: z.string().regex(VERSION_PATTERN, "must be 1-128 letters, digits or . _ : + -").optional(),
  force: z.enum(["true", "false"]).optional(),
});

export type RunPreview =
  | { outcome: "runs"; version: string }
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

/** What "Rebuild now" would do right now: run, skip (and why), or wait for another version. */
export async function previewRun(
  context: WebContext,
  name: string,
  query: z.output<typeof previewQuery>,
): Promise<RunPreview> {
  const definition = definitionOr404(context, name, query.tenant);
  const { connections } = context;
  let version = query.version;
  if (!version) {
    try {
      version = await hashInputs(definition.inputPaths, previewInputHashes);
    } catch {
      throw badRequest("version: the inputs cannot be read here; give a version");
    }
  }
  // In the worker's order: a version already rebuilt is skipped before the claim is looked at.
  if (query.force !== "true") {
    const runId = await connections.main.get(connections.keys.idempotency(idempotencyKey(name, query.tenant, version)));
    if (runId) {
      const finishedAt = await connections.main.hget(connections.keys.run(runId), "finishedAt");
      const at = finishedAt ? Number(finishedAt) : null;
      return {
        outcome: "skip",
        reason: "already-rebuilt",
        version,
        runId,
        rebuiltAt: at,
        message: `would be skipped: already rebuilt${at ? ` at ${formatAbsolute(at, "utc")}` : ""} (use force to rebuild anyway)`,
      };
    }
  }
  const claim = await readClaim(connections.claims, connections.keys, claimName(definition.outputPath, query.tenant));
  if (claim) {
    const heldBy = claim.holder.workerId ?? claim.holder.host ?? "a worker";
    const seconds = Math.max(0, Math.round(claim.pttlMs / 1000));
    if (claim.holder.version === version) {
      return {
        outcome: "skip",
        reason: "claim-held",
        version,
        heldBy,
        pttlMs: claim.pttlMs,
        message: `would be skipped: held by ${heldBy}, ${seconds} s left`,
      };
    }
    return {
      outcome: "defer",
      version,
      heldBy,
      pttlMs: claim.pttlMs,
      message: `would wait: ${heldBy} is building version ${claim.holder.version ?? "?"} (${seconds} s left)`,
    };
  }
  return { outcome: "runs", version };
}
