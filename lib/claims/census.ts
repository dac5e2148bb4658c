/**
 * Every active claim in two round trips, for the alert evaluator and the `/metrics` scrape:
 * the registry (plus the skips hash and the counters), then one script call (CLAIM_CENSUS, per
 * 2 000 claims) returning PTTL and the fields staleness needs per claim, with the server's TIME. Lighter than `listClaims` (no token, no pruning), since
 * both callers read all claims every cycle. O(claims).
 */
import type { Redis } from "ioredis";
import type { RedisKeys } from "../redis/keys";
import { CLAIM_CENSUS, runVariadicScript, type ScriptingClient } from "../redis/scripts";
import { holderFromHash } from "./holder";
import { staleReasons, type StaleReason } from "./list";
import { staleSince } from "./stale";
import type { ClaimHolder } from "./types";

export interface CensusClaim {
  name: string;
  pttlMs: number;
  holder: ClaimHolder;
  stale: StaleReason[];
  /** Claims-server ms since when the claim counts as stale, or null. */
  staleSince: number | null;
}

export interface ClaimCensus {
  /** The claims server's time (ms). */
  serverTime: number;
  claims: CensusClaim[];
  /** Claim name → consecutive skips (claims with none are absent). */
  skips: Map<string, number>;
  /** Raw `claimCounters` hash (lib/metrics/counters). */
  counters: Record<string, string>;
}

const FIELDS = [
  "refreshedAt",
  "refreshEveryMs",
  "acquiredAt",
  "ttlMs",
  "fence",
  "jobId",
  "holder",
  "revokedBy",
  "revokedAt",
];
/** Claims per script call: about 5 ms of Redis time each. */
const CHUNK = 2_000;

export async function readClaimCensus(
  client: Pick<Redis, "pipeline"> & ScriptingClient,
  keys: RedisKeys,
  liveWorkerIds: ReadonlySet<string> | undefined,
): Promise<ClaimCensus> {
  const first = await client
    .pipeline()
    .zrange(keys.claimRegistry, "0", "-1")
    .hgetall(keys.claimSkips)
    .hgetall(keys.claimCounters)
    .exec();
  const failed = first?.find(([error]) => error);
  if (!first || failed) throw failed?.[0] ?? new Error("claims census: no reply");
  const names = first[0]![1] as string[];
  const skipsHash = first[1]![1] as Record<string, string>;
  const counters = first[2]![1] as Record<string, string>;

  const claimKeys: string[] = [];
  for (const name of names) claimKeys.push(keys.claim(name), keys.claimMeta(name));
  // Chunks keep one script call (and the Redis pause it makes) bounded.
  const claims: CensusClaim[] = [];
  let serverTime = 0;
  for (let from = 0; from < names.length || from === 0; from += CHUNK) {
    const chunk = names.slice(from, from + CHUNK);
    const reply = (await runVariadicScript(
      client,
      CLAIM_CENSUS,
      [keys.claimRegistry],
      claimKeys.slice(from * 2, (from + chunk.length) * 2),
      FIELDS,
    )) as (string | number)[];
    serverTime = Number(reply[0]);
    const width = 1 + FIELDS.length;
    chunk.forEach((name, i) => {
      const base = 1 + i * width;
      const pttlMs = Number(reply[base]);
      if (pttlMs < 0 || reply[base + 1] === "") return; // expired since the registry was read
      const hash: Record<string, string> = {};
      FIELDS.forEach((field, j) => (hash[field] = String(reply[base + 1 + j] ?? "")));
      const holder = holderFromHash(hash);
      const stale = staleReasons(holder, serverTime, liveWorkerIds);
      claims.push({ name, pttlMs, holder, stale, staleSince: staleSince({ stale, holder }) });
    });
    if (names.length === 0) break;
  }
  const skips = new Map<string, number>();
  for (const [name, count] of Object.entries(skipsHash)) if (Number(count) > 0) skips.set(name, Number(count));
  return { serverTime, claims, skips, counters };
}
