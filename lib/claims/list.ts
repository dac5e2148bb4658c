/**
 * Listing claims for the dashboard: the registry (ZSET of names, ordered by name) plus one
 * pipeline per page — O(page) Redis work, never KEYS or a keyspace scan; a search reads the
 * registry's names in ranges of SEARCH_CHUNK until the page is full. Registry entries whose
 * claim expired are pruned on the way (owner of the name re-checked in a script, so a name
 * claimed again meanwhile is kept).
 */
import { claimNameMatches } from "./search";
import type { Redis } from "ioredis";
import type { RedisKeys } from "../redis/keys";
import {
  CLAIM_PRUNE,
  queueScript,
  REVOKED_PREFIX,
  scriptPipeline,
  type ScriptingPipelineClient,
} from "../redis/scripts";
import { holderFromHash } from "./holder";
import type { ClaimHolder } from "./types";
import { staleReasons } from "./stale";
export { staleReasons };

/** Largest page `listClaims` serves in one call. */
export const MAX_CLAIMS_PAGE = 1_000;
/** Registry names read per ZRANGEBYLEX while searching (~40 bytes each). */
const SEARCH_CHUNK = 2_000;
/**
 * Most registry names one search call reads: past it the page ends early (fewer rows, with a
 * `nextCursor` to read on), so a search that matches little costs bounded work per call however
 * many claims exist. 10 000 claims fit in one call.
 */
export const SEARCH_SCAN_MAX = 20_000;

export type StaleReason =
  | {
      kind: "refresh-overdue";
      /** Time since the last successful refresh, on the claims server's clock. */
      sinceRefreshMs: number;
      refreshEveryMs: number;
    }
  | { kind: "holder-not-live"; workerId: string };

export interface ClaimInfo {
  name: string;
  /** The holder's token; an operator's force release must send it back (compare-and-delete). */
  token: string;
  /**
   * Set while an operator's force release waits for the holder to stop (nobody else can take
   * the claim meanwhile; `pttlMs` is what is left of the release window).
   */
  revoked: { by: string | null; at: number | null } | null;
  fence: number | null;
  /** Remaining lifetime, from PTTL at read time. */
  pttlMs: number;
  holder: ClaimHolder;
  consecutiveSkips: number;
  /** Empty when the claim looks healthy. */
  stale: StaleReason[];
}

export interface ListClaimsOptions {
  /** Page size (1…1000). Omitted: every claim in one call (O(number of claims)). */
  limit?: number;
  /** `nextCursor` of the previous page; names after it are returned. */
  cursor?: string | null;
  /**
   * Only names containing this, case-insensitive (as the Rebuilds and Runs searches): the
   * registry's names are read in ranges from the cursor and matched here, up to SEARCH_SCAN_MAX
   * names per call; only the matches' claims are read.
   */
  search?: string | null;
  /**
   * Ids of workers with a live heartbeat (`listLiveWorkers` on the main Redis). Omitted:
   * the holder-not-live check is skipped, since the claims Redis may be another server.
   */
  liveWorkerIds?: ReadonlySet<string>;
}

export interface ClaimPage {
  claims: ClaimInfo[];
  /** Cursor of the next page, or `null` at the end. */
  nextCursor: string | null;
  /** Registry entries of expired claims removed during this call. */
  pruned: number;
  /** The claims server's time (ms) the staleness was judged at. */
  serverTime: number;
}

type ListClient = ScriptingPipelineClient & Pick<Redis, "zrangebylex">;

/** Names in the registry after `cursor` (all: limit undefined), and the cursor of the next page. */
async function pageOfNames(
  client: ListClient,
  keys: RedisKeys,
  cursor: string | null | undefined,
  limit: number | undefined,
): Promise<{ names: string[]; nextCursor: string | null }> {
  const from = cursor ? `(${cursor}` : "-";
  const names =
    limit === undefined
      ? await client.zrangebylex(keys.claimRegistry, from, "+")
      : await client.zrangebylex(keys.claimRegistry, from, "+", "LIMIT", 0, limit);
  const nextCursor = limit !== undefined && names.length === limit ? names[names.length - 1]! : null;
  return { names, nextCursor };
}

/**
 * Names after `cursor` containing `search` (case-insensitive), up to `limit` of them, reading at
 * most SEARCH_SCAN_MAX names; the next page starts after the last name read or returned.
 */
async function searchNames(
  client: ListClient,
  keys: RedisKeys,
  search: string,
  cursor: string | null | undefined,
  limit: number | undefined,
): Promise<{ names: string[]; nextCursor: string | null }> {
  const want = limit ?? Infinity;
  const names: string[] = [];
  let after = cursor ?? null;
  let read = 0;
  while (read < SEARCH_SCAN_MAX) {
    const asked = Math.min(SEARCH_CHUNK, SEARCH_SCAN_MAX - read);
    const chunk = await client.zrangebylex(keys.claimRegistry, after ? `(${after}` : "-", "+", "LIMIT", 0, asked);
    for (const name of chunk) {
      read += 1;
      after = name;
      if (!claimNameMatches(name, search)) continue;
      names.push(name);
      if (names.length === want) return { names, nextCursor: name };
    }
    if (chunk.length < asked) return { names, nextCursor: null };
  }
  return { names, nextCursor: after };
}

export async function listClaims(
  client: ListClient,
  keys: RedisKeys,
  options: ListClaimsOptions = {},
): Promise<ClaimPage> {
  const { limit, cursor } = options;
  if (limit !== undefined && (!Number.isSafeInteger(limit) || limit < 1 || limit > MAX_CLAIMS_PAGE)) {
    throw new RangeError(`limit must be a whole number from 1 to ${MAX_CLAIMS_PAGE} (got ${limit})`);
  }
  const { names, nextCursor } = options.search
    ? await searchNames(client, keys, options.search, cursor, limit)
    : await pageOfNames(client, keys, cursor, limit);

  const { claims, missing, serverTime } = await readClaims(client, keys, names, options.liveWorkerIds);
  let pruned = 0;
  if (missing.length > 0) {
    const pipeline = scriptPipeline(client);
    for (const name of missing) {
      queueScript(
        pipeline,
        CLAIM_PRUNE,
        [keys.claim(name), keys.claimRegistry, keys.claimTrail(name), keys.claimsEnded],
        [name],
      );
    }
    for (const [error, reply] of (await pipeline.exec()) ?? []) if (!error && reply === 1) pruned += 1;
  }
  return { claims, nextCursor, pruned, serverTime };
}

/** One claim with its holder, PTTL, skips and staleness, or `null` when nobody holds it. */
export async function readClaim(
  client: ScriptingPipelineClient,
  keys: RedisKeys,
  name: string,
  options: Pick<ListClaimsOptions, "liveWorkerIds"> = {},
): Promise<ClaimInfo | null> {
  const { claims } = await readClaims(client, keys, [name], options.liveWorkerIds);
  return claims[0] ?? null;
}

/** Several claims in one pipeline, by name; names nobody holds are absent from the map. */
export async function readClaimsByName(
  client: ScriptingPipelineClient,
  keys: RedisKeys,
  names: readonly string[],
  options: Pick<ListClaimsOptions, "liveWorkerIds"> = {},
): Promise<Map<string, ClaimInfo>> {
  if (names.length === 0) return new Map();
  const { claims } = await readClaims(client, keys, names, options.liveWorkerIds);
  return new Map(claims.map((claim) => [claim.name, claim]));
}

/** One pipeline: TIME, then GET + PTTL + HGETALL + HGET(skips) per name. */
async function readClaims(
  client: ScriptingPipelineClient,
  keys: RedisKeys,
  names: readonly string[],
  liveWorkerIds: ReadonlySet<string> | undefined,
): Promise<{ claims: ClaimInfo[]; missing: string[]; serverTime: number }> {
  const pipeline = scriptPipeline(client);
  pipeline.time();
  for (const name of names) {
    pipeline.get(keys.claim(name)).pttl(keys.claim(name)).hgetall(keys.claimMeta(name)).hget(keys.claimSkips, name);
  }
  const replies = (await pipeline.exec()) ?? [];
  const failed = replies.find(([error]) => error);
  if (failed) throw failed[0];
  const time = replies[0]![1] as [string, string];
  const serverTime = Number(time[0]) * 1000 + Math.floor(Number(time[1]) / 1000);

  const claims: ClaimInfo[] = [];
  const missing: string[] = [];
  names.forEach((name, i) => {
    const base = 1 + i * 4;
    const value = replies[base]![1] as string | null;
    const pttlMs = replies[base + 1]![1] as number;
    const hash = replies[base + 2]![1] as Record<string, string>;
    const skips = replies[base + 3]![1] as string | null;
    // PTTL -2: expired between GET and PTTL.
    if (value === null || pttlMs === -2) {
      missing.push(name);
      return;
    }
    const holder = holderFromHash(hash);
    const revoked = value.startsWith(REVOKED_PREFIX);
    claims.push({
      name,
      token: revoked ? value.slice(REVOKED_PREFIX.length) : value,
      revoked: revoked ? { by: holder.revokedBy, at: holder.revokedAt } : null,
      fence: holder.fence,
      pttlMs,
      holder,
      consecutiveSkips: Number(skips ?? 0),
      stale: staleReasons(holder, serverTime, liveWorkerIds),
    });
  });
  return { claims, missing, serverTime };
}
