/**
 * Every active claim, or only the stale ones, for the `/metrics` scrape and the alert evaluator:
 * the registry (plus the skips hash and the counters), then one script call per 2 000 claims
 * (CLAIM_CENSUS) returning, per claim, one string with its PTTL and the fields staleness, the
 * alerts and the metrics read, with the server's TIME. With `onlyStale` (the evaluator alerts on
 * no other claims) a first script per chunk (CLAIM_STALE_CANDIDATES) picks the claims that may be
 * stale within `NEAR_STALE_MS`, only those are read, and `staleReasons` decides on them. Lighter
 * than `listClaims` (no token, no pruning, no jobId or revocation fields), since both callers read
 * all claims every cycle. O(claims) Redis work; O(stale claims) decoding with `onlyStale`.
 *
 * With `onlyStale` and `notRefreshedForMs` (the evaluator: a claim alerts only once stale for the
 * rule's `for`, and staleness never starts before the last refresh), the claims come from the
 * `claimRefreshes` index instead of the registry (CLAIM_NOT_REFRESHED): only those not refreshed
 * for that long, plus any registered claim the index lacks. O(those claims), not O(claims).
 * They are read whole (no CLAIM_STALE_CANDIDATES pick: few, and mostly stale), so index entries
 * whose claim expired are seen and dropped on the way (CLAIM_REFRESHES_PRUNE).
 */
import type { Redis } from "ioredis";
import type { RedisKeys } from "../redis/keys";
import {
  CENSUS_PAGE_SIZE,
  CLAIM_CENSUS,
  CLAIM_CENSUS_PAGE,
  CLAIM_NOT_REFRESHED,
  CLAIM_REFRESHES_PRUNE,
  CLAIM_STALE_CANDIDATES,
  queueScript,
  runScript,
  runVariadicScript,
  scriptPipeline,
  type ScriptingClient,
} from "../redis/scripts";
import { holderFromCensusRecord, unexpectedReply, type CensusHolder } from "./holder";
import { staleReasons, type StaleReason } from "./list";
import { STALE_AFTER_REFRESHES, staleSince } from "./stale";

export interface CensusClaim {
  name: string;
  pttlMs: number;
  holder: CensusHolder;
  stale: StaleReason[];
  /** Claims-server ms since when the claim counts as stale, or null. */
  staleSince: number | null;
}

export interface ClaimCensus {
  /** The claims server's time (ms). */
  serverTime: number;
  /** Every held claim; with `onlyStale`, the stale ones. */
  claims: CensusClaim[];
  /** Claim name → consecutive skips (claims with none are absent). */
  skips: Map<string, number>;
  /** Raw `claimCounters` hash (lib/metrics/counters). */
  counters: Record<string, string>;
}

/** Claims per script call: a few ms of Redis time each. */
const CHUNK = 2_000;
/**
 * How far ahead the candidates' pick looks: a claim that turns stale between the pick and the
 * read (a few ms apart) is still read, so `onlyStale` returns what the full census would.
 */
const NEAR_STALE_MS = 5_000;

export async function readClaimCensus(
  client: Pick<Redis, "pipeline"> & ScriptingClient,
  keys: RedisKeys,
  liveWorkerIds: ReadonlySet<string> | undefined,
  options: { onlyStale?: boolean; notRefreshedForMs?: number } = {},
): Promise<ClaimCensus> {
  if (options.onlyStale && !liveWorkerIds) throw new Error("claims census: onlyStale needs the live worker ids");
  if (!options.onlyStale) return readWholeCensus(client, keys, liveWorkerIds);
  const fromIndex = options.onlyStale === true && options.notRefreshedForMs !== undefined;
  const pipeline = scriptPipeline(client, fromIndex ? [CLAIM_NOT_REFRESHED] : []);
  if (fromIndex) {
    queueScript(
      pipeline,
      CLAIM_NOT_REFRESHED,
      [keys.claimRefreshes, keys.claimRegistry],
      [Math.max(0, Math.floor(options.notRefreshedForMs!)), NEAR_STALE_MS],
    );
  } else {
    pipeline.zrange(keys.claimRegistry, "0", "-1");
  }
  const first = await pipeline.hgetall(keys.claimSkips).hgetall(keys.claimCounters).exec();
  const failed = first?.find(([error]) => error);
  if (!first || failed) throw failed?.[0] ?? new Error("claims census: no reply");
  let names: string[];
  /** Names read from the index: their entry is dropped if the claim turns out gone. */
  let indexed = new Set<string>();
  if (fromIndex) {
    const [, notRefreshed, unindexed] = first[0]![1] as [number, string[], string[]];
    indexed = new Set(notRefreshed);
    names = unindexed.length === 0 ? notRefreshed : [...notRefreshed, ...unindexed.filter((n) => !indexed.has(n))];
  } else {
    names = first[0]![1] as string[];
  }
  const skipsHash = first[1]![1] as Record<string, string>;
  const counters = first[2]![1] as Record<string, string>;

  // Chunks keep one script call (and the Redis pause it makes) bounded.
  const claims: CensusClaim[] = [];
  const gone: string[] = [];
  let serverTime = fromIndex ? Number((first[0]![1] as unknown[])[0]) : 0;
  for (let from = 0; from < names.length || (from === 0 && !fromIndex); from += CHUNK) {
    let chunk = names.slice(from, from + CHUNK);
    if (!fromIndex && chunk.length > 0) {
      const metaKeys = chunk.map((name) => keys.claimMeta(name));
      const picked = (await runVariadicScript(client, CLAIM_STALE_CANDIDATES, [keys.claimRegistry], metaKeys, [
        STALE_AFTER_REFRESHES,
        NEAR_STALE_MS,
        ...liveWorkerIds!,
      ])) as unknown[];
      if (!Array.isArray(picked)) throw unexpectedReply("stale candidates", picked);
      chunk = picked.map((k) => chunk[Number(k) - 1]!);
      if (chunk.length === 0 && from + CHUNK < names.length) continue;
    }
    const claimKeys: string[] = [];
    for (const name of chunk) claimKeys.push(keys.claim(name), keys.claimMeta(name));
    const reply = (await runVariadicScript(client, CLAIM_CENSUS, [keys.claimRegistry], claimKeys, [0])) as unknown[];
    if (!Array.isArray(reply) || reply.length !== 1 + chunk.length) throw unexpectedReply("census", reply);
    serverTime = Number(reply[0]);
    chunk.forEach((name, i) => {
      const record = reply[1 + i] as string;
      if (record === "") {
        // expired since the registry was read, or no metadata
        if (indexed.has(name)) gone.push(name);
        return;
      }
      const claim = censusClaim(name, record, serverTime, liveWorkerIds);
      if (claim.stale.length > 0) claims.push(claim);
    });
    if (names.length === 0) break;
  }
  for (let from = 0; from < gone.length; from += CHUNK) {
    const names = gone.slice(from, from + CHUNK);
    await runVariadicScript(
      client,
      CLAIM_REFRESHES_PRUNE,
      [keys.claimRefreshes],
      names.map((name) => keys.claim(name)),
      names,
    );
  }
  return { serverTime, claims, skips: skipsOf(skipsHash), counters };
}

/**
 * Every held claim, a registry page per CLAIM_CENSUS_PAGE call (the script walks the registry and
 * builds the keys itself). The next page is asked for before this one is decoded, so Redis reads
 * it while this process decodes. Pages follow the registry in name order from the last name read,
 * so a claim registered or released meanwhile never shifts another out of the census.
 *
 * With `visit`, each claim goes to it as its page is decoded and `claims` comes back empty: the
 * scrape keeps no claim objects (at 10 000 claims, keeping them was most of its garbage
 * collection).
 */
export async function readWholeCensus(
  client: Pick<Redis, "pipeline"> & ScriptingClient,
  keys: RedisKeys,
  /** May be a promise: the pages are asked for before it settles (the scrape reads both at once). */
  liveWorkerIds: ReadonlySet<string> | undefined | Promise<ReadonlySet<string>>,
  visit?: (claim: CensusClaim) => void,
): Promise<ClaimCensus> {
  const hashes = client.pipeline().hgetall(keys.claimSkips).hgetall(keys.claimCounters).exec();
  hashes.catch(() => {}); // awaited below; a page's failure must not leave it unhandled
  const page = (from: string): Promise<unknown> => {
    const reply = runScript(
      client,
      CLAIM_CENSUS_PAGE,
      [keys.claimRegistry],
      [keys.claimKeyPrefixes.claim, keys.claimKeyPrefixes.claimMeta, from, CENSUS_PAGE_SIZE],
    );
    reply.catch(() => {}); // awaited by the loop unless a decode error ends it first
    return reply;
  };
  const claims: CensusClaim[] = [];
  let serverTime = 0;
  let pending: Promise<unknown> | null = page("-");
  const live = await liveWorkerIds;
  while (pending) {
    const reply: unknown = await pending;
    if (!Array.isArray(reply) || reply.length < 2) throw unexpectedReply("census page", reply);
    const last = String(reply[1]);
    pending = last === "" ? null : page(`(${last}`);
    serverTime = Number(reply[0]);
    for (let i = 2; i < reply.length; i++) {
      const record = String(reply[i]);
      const newline = record.indexOf("\n");
      if (newline <= 0) throw unexpectedReply("census page", record);
      const claim = censusClaim(record.slice(0, newline), record, serverTime, live, newline + 1);
      if (visit) visit(claim);
      else claims.push(claim);
    }
  }
  const first = await hashes;
  const failed = first?.find(([error]) => error);
  if (!first || failed) throw failed?.[0] ?? new Error("claims census: no reply");
  return {
    serverTime,
    claims,
    skips: skipsOf(first[0]![1] as Record<string, string>),
    counters: first[1]![1] as Record<string, string>,
  };
}

function skipsOf(hash: Record<string, string>): Map<string, number> {
  const skips = new Map<string, number>();
  for (const [name, count] of Object.entries(hash)) if (Number(count) > 0) skips.set(name, Number(count));
  return skips;
}

/** One claim from its census record (`pttl,` then the fields `holderFromCensusRecord` reads). */
function censusClaim(
  name: string,
  record: string,
  serverTime: number,
  liveWorkerIds: ReadonlySet<string> | undefined,
  /** Where the record's `pttl,` starts (after the name, in a CLAIM_CENSUS_PAGE record). */
  from = 0,
): CensusClaim {
  const comma = record.indexOf(",", from);
  const holder = holderFromCensusRecord(record, comma + 1);
  const stale = staleReasons(holder, serverTime, liveWorkerIds);
  return { name, pttlMs: Number(record.slice(from, comma)), holder, stale, staleSince: staleSince({ stale, holder }) };
}
