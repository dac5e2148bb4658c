/**
 * Every active claim in two round trips, for the alert evaluator and the `/metrics` scrape:
 * the registry, then one pipeline of PTTL + HMGET of the fields staleness needs per claim (plus
 * TIME, the skips hash and the counters). Lighter than `listClaims` (no token, no pruning), since
 * both callers read all claims every cycle. O(claims).
 */
import type { Redis } from "ioredis";
import type { RedisKeys } from "../redis/keys";
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

const FIELDS = ["refreshedAt", "refreshEveryMs", "acquiredAt", "ttlMs", "fence", "jobId", "holder"] as const;

export async function readClaimCensus(
  client: Pick<Redis, "pipeline">,
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

  const pipeline = client.pipeline().time();
  for (const name of names) pipeline.pttl(keys.claim(name)).hmget(keys.claimMeta(name), ...FIELDS);
  const replies = (await pipeline.exec()) ?? [];
  const error = replies.find(([e]) => e);
  if (error) throw error[0];
  const time = replies[0]![1] as [string, string];
  const serverTime = Number(time[0]) * 1000 + Math.floor(Number(time[1]) / 1000);

  const claims: CensusClaim[] = [];
  names.forEach((name, i) => {
    const pttlMs = replies[1 + i * 2]![1] as number;
    const values = replies[2 + i * 2]![1] as (string | null)[];
    if (pttlMs < 0 || values[0] === null) return; // expired since the registry was read
    const hash: Record<string, string> = {};
    FIELDS.forEach((field, j) => (hash[field] = values[j] ?? ""));
    const holder = holderFromHash(hash);
    const stale = staleReasons(holder, serverTime, liveWorkerIds);
    claims.push({ name, pttlMs, holder, stale, staleSince: staleSince({ stale, holder }) });
  });
  const skips = new Map<string, number>();
  for (const [name, count] of Object.entries(skipsHash)) if (Number(count) > 0) skips.set(name, Number(count));
  return { serverTime, claims, skips, counters };
}
