/** Claims as the API and the Claims page show them. */
import { z } from "zod";
import { limitParam, reasonText, searchParam } from "./input";
import {
  forceReleaseClaim,
  listClaims,
  MAX_CLAIMS_PAGE,
  readClaimTrail,
  readEndedClaims,
  type ClaimHolder,
  type ClaimInfo,
  type TrailEntry,
} from "../claims";
import { FORCE_RELEASE_MARGIN_MS } from "../claims/force-release";
import { describeStale, staleSince } from "../claims/stale";
import { DEFER_MIN_MS } from "../rebuilds/decide";
import { checkClaimName } from "../claims/name";
import { runPlaceOf } from "../runs/records";
import { noteForceRelease } from "../runs/writer";
import { liveWorkerIdSet } from "../workers/heartbeat";
import type { WebContext } from "../web/context";
import { badRequest, fromRedis, refusal, type Reply } from "./errors";

export type { TrailEntry };

export interface ApiClaim {
  name: string;
  rebuild: string | null;
  tenant: string | null;
  version: string | null;
  token: string;
  fence: number | null;
  holder: {
    host: string | null;
    pid: number | null;
    workerId: string | null;
    jobId: string | null;
    runId: string | null;
  };
  acquiredAt: number | null;
  refreshedAt: number | null;
  /** The holder's configured TTL. */
  ttlMs: number | null;
  /** Remaining lifetime when read (server PTTL); the UI counts down from `serverTime`. */
  pttlMs: number;
  refreshEveryMs: number | null;
  stale: boolean;
  staleReason: string | null;
  /** Its holder worker had no live heartbeat when read (one of the stale reasons). */
  holderNotLive: boolean;
  /** Since when the claim counts as stale (server time, ms), or null. */
  staleSince: number | null;
  consecutiveSkips: number;
  /**
   * Force-released by an operator and waiting for its holder to stop: nobody else can take it
   * until the holder acknowledges or `pttlMs` runs out.
   */
  revoked: { by: string | null; at: number | null } | null;
  /**
   * What the release dialog promises: a force release's running attempt is retried (deferred,
   * no attempt spent) at the latest this long after `pttlMs` runs out — the holder's declared
   * stop time (its steps' killGrace), the release margin and the shortest deferral. Null when
   * not known yet (a claim added from a live event).
   */
  retryAfterReleaseMs: number | null;
}

export interface ApiClaimPage {
  claims: ApiClaim[];
  nextCursor: string | null;
  serverTime: number;
}

export function toApiClaim(claim: ClaimInfo): ApiClaim {
  const { holder } = claim;
  return {
    name: claim.name,
    rebuild: holder.rebuild,
    tenant: holder.tenant,
    version: holder.version,
    token: claim.token,
    fence: claim.fence,
    holder: { host: holder.host, pid: holder.pid, workerId: holder.workerId, jobId: holder.jobId, runId: holder.runId },
    acquiredAt: holder.acquiredAt,
    refreshedAt: holder.refreshedAt,
    ttlMs: holder.ttlMs,
    pttlMs: claim.pttlMs,
    refreshEveryMs: holder.refreshEveryMs,
    stale: claim.stale.length > 0,
    staleReason: describeStale(claim.stale),
    holderNotLive: claim.stale.some((reason) => reason.kind === "holder-not-live"),
    staleSince: staleSince(claim),
    consecutiveSkips: claim.consecutiveSkips,
    revoked: claim.revoked,
    retryAfterReleaseMs: (holder.stopWithinMs ?? 0) + FORCE_RELEASE_MARGIN_MS + DEFER_MIN_MS,
  };
}

export const claimsQuery = z.strictObject({
  limit: limitParam(MAX_CLAIMS_PAGE, 100),
  cursor: z.string().min(1).max(1_100).optional(),
  /** Claim names containing this, case-insensitive (`acme`, `tiles/`): lib/claims/list.ts. */
  q: searchParam(),
});

export async function getClaims(
  context: WebContext,
  query: { limit: number; cursor?: string | undefined; q?: string | undefined },
): Promise<ApiClaimPage> {
  const { connections } = context;
  if (query.cursor !== undefined && !checkClaimName(query.cursor).ok) throw badRequest("cursor: not a claim name");
  const liveWorkerIds = await fromRedis("the main Redis", liveWorkerIdSet(connections.main, connections.keys));
  const page = await fromRedis(
    "the claims Redis",
    listClaims(connections.claims, connections.keys, {
      limit: query.limit,
      cursor: query.cursor ?? null,
      search: query.q ?? null,
      liveWorkerIds,
    }),
  );
  return { claims: page.claims.map(toApiClaim), nextCursor: page.nextCursor, serverTime: page.serverTime };
}

export const releaseBody = z.strictObject({
  name: z.string().min(1, "must not be empty").max(1_100),
  token: z.string().min(1, "must not be empty").max(300),
  reason: reasonText(3),
});

/** A holder in words, for a release that found the claim in other hands: who, which run, version and fence. */
function describeHolder(holder: ClaimHolder): string | null {
  const who = holder.workerId ? `worker ${holder.workerId}` : holder.host ? `host ${holder.host}` : null;
  const what = [
    holder.runId ? `run ${holder.runId}` : null,
    holder.version ? `version ${holder.version}` : null,
    holder.fence !== null ? `fence ${holder.fence}` : null,
  ].filter(Boolean);
  if (!who && what.length === 0) return null;
  return `${who ?? "another holder"}${what.length ? ` (${what.join(", ")})` : ""}`;
}

export type ReleaseOutcome =
  /** The holder is told to stop; the claim is free when it has, at the latest in `releaseWindowMs`. */
  | { status: "released"; auditId: string; releaseWindowMs: number }
  /** Already force-released; its holder has not stopped yet. */
  | { status: "releasing"; auditId: string; releaseWindowMs: number }
  /**
   * Held with another token now: `currentHolder` says by whom in words (worker or host, run,
   * version, fence), `currentRunId` and `currentFence` for scripts.
   */
  | {
      status: "not-owner";
      auditId: string;
      currentHolder: string | null;
      currentRunId: string | null;
      currentFence: number | null;
    }
  | { status: "missing"; auditId: string };

export async function releaseClaimAsOperator(
  context: WebContext,
  body: z.output<typeof releaseBody>,
  actor: string,
): Promise<ReleaseOutcome> {
  const check = checkClaimName(body.name);
  if (!check.ok) throw badRequest(`name: ${check.reason}`);
  const { connections } = context;
  const result = await forceReleaseClaim({ claims: connections.claims, audit: connections.main }, connections.keys, {
    name: body.name,
    token: body.token,
    actor,
    reason: body.reason,
  });
  if (result.status === "not-owner") {
    return {
      status: "not-owner",
      auditId: result.auditId,
      currentHolder: describeHolder(result.holder),
      currentRunId: result.holder.runId,
      currentFence: result.holder.fence,
    };
  }
  if (result.status === "released" || result.status === "releasing") {
    const { holder } = result;
    if (result.status === "released" && holder.runId && holder.jobId) {
      // Its run record names the release, for whoever closes it if the holder never answers.
      const { retention } = context.definitions;
      const store = {
        client: connections.main,
        keys: connections.keys,
        retention: { maxPerRebuild: retention.runs, maxAgeMs: retention.runAge },
      };
      const run = { ...runPlaceOf(holder.rebuild, holder.tenant), runId: holder.runId, jobId: holder.jobId };
      await noteForceRelease(store, run, { actor, reason: body.reason, auditId: result.auditId }).catch(() => {});
    }
    return { status: result.status, auditId: result.auditId, releaseWindowMs: result.releaseWindowMs };
  }
  return { status: "missing", auditId: result.auditId };
}

/** 200 released; 409 not released (already releasing, changed hands, or nobody holds it). */
export function releaseReply(name: string, result: ReleaseOutcome): Reply {
  switch (result.status) {
    case "released":
      return { status: 200, body: result };
    case "releasing":
      return refusal(
        result,
        `not released again: ${name} was force-released already and its holder has not stopped yet; it is free at the latest in ${Math.ceil(result.releaseWindowMs / 1000)} s`,
      );
    case "not-owner":
      return refusal(
        result,
        `not released: ${name} is held with another token now (by ${result.currentHolder ?? "another holder"}); nothing changed`,
      );
    case "missing":
      return refusal(result, `not released: nobody holds ${name} (it expired or was released)`);
  }
}

export const trailQuery = z.strictObject({
  name: z.string().min(1, "must not be empty").max(1_100),
  limit: limitParam(50, 50),
});

/** One claim name's trail, newest first (a name never claimed has an empty one). */
export async function getClaimTrail(
  context: WebContext,
  query: { name: string; limit: number },
): Promise<{ name: string; entries: TrailEntry[] }> {
  const check = checkClaimName(query.name);
  if (!check.ok) throw badRequest(`name: ${check.reason}`);
  const { connections } = context;
  return {
    name: query.name,
    entries: await fromRedis(
      "the claims Redis",
      readClaimTrail(connections.claims, connections.keys, query.name, query.limit),
    ),
  };
}

export const endedQuery = z.strictObject({ limit: limitParam(200, 20) });

/** Claims that ended recently (released, stopped after a force release, expired, taken over), newest first. */
export async function getEndedClaims(
  context: WebContext,
  query: { limit: number },
): Promise<{ entries: TrailEntry[] }> {
  const { connections } = context;
  return {
    entries: await fromRedis("the claims Redis", readEndedClaims(connections.claims, connections.keys, query.limit)),
  };
}
