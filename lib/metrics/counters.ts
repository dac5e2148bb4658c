/**
 * Counters that must survive restarts and read the same from every process: kept in Redis, one
 * HASH per server, incremented where the event happens and read at scrape time (lib/metrics/collect).
 *
 * Field layout (rebuild and tenant names never contain '|'; a claim name comes last, whole):
 *   main Redis   `metricsCounters`
 *     runs|<rebuild>|<tenant>|<status>   runs finished with that status
 *     dur|<rebuild>|<tenant>|<le>        finished runs whose duration falls in that bucket (not cumulative)
 *     dursum|<rebuild>|<tenant>          sum of durations, seconds
 *     durcount|<rebuild>|<tenant>        runs with a duration
 *     lastsuccess|<rebuild>|<tenant>     finish time of the newest rebuilt run, ms
 *     missed|<rebuild>|<tenant>          scheduled ticks that produced no run within the grace
 *   claims Redis `claimCounters`
 *     takeovers|<rebuild>|<tenant>       claims taken over from an earlier, dead attempt
 *     fencing|<claim>                    publishes refused by the fence
 */
import type { ChainableCommander, Redis } from "ioredis";
import type { RedisKeys } from "../redis/keys";

/** Upper bounds of the run-duration histogram, seconds (a rebuild runs seconds to hours). */
export const DURATION_BUCKETS = [1, 5, 15, 60, 300, 900, 1800, 3600, 7200, 14400, 43200] as const;

export interface FinishedRun {
  rebuild: string;
  tenant?: string | null;
  status: string;
  durationMs: number | null | undefined;
  finishedAt: number;
}

/** Queues the counter updates of one finished run on `tx` (the run's own final MULTI). */
export function countRunFinished(tx: ChainableCommander, keys: RedisKeys, run: FinishedRun): ChainableCommander {
  const series = `${run.rebuild}|${run.tenant ?? ""}`;
  tx.hincrby(keys.metricsCounters, `runs|${series}|${run.status}`, 1);
  if (typeof run.durationMs === "number" && run.durationMs >= 0) {
    const seconds = run.durationMs / 1000;
    const le = DURATION_BUCKETS.find((bound) => seconds <= bound) ?? "+Inf";
    tx.hincrby(keys.metricsCounters, `dur|${series}|${le}`, 1)
      .hincrbyfloat(keys.metricsCounters, `dursum|${series}`, seconds)
      .hincrby(keys.metricsCounters, `durcount|${series}`, 1);
  }
  if (run.status === "rebuilt") tx.hset(keys.metricsCounters, `lastsuccess|${series}`, String(run.finishedAt));
  return tx;
}

export interface TakeoverEvent {
  claim: string;
  rebuild: string | null | undefined;
  tenant: string | null | undefined;
  fence: number;
  previousFence: number | null;
  jobId: string | null | undefined;
}

/** Takeover events kept for the `takeover` alert (claims Redis stream, approximately capped). */
const TAKEOVERS_KEPT = 1_000;

/** One takeover: its counter and an event for the alert evaluator, in one MULTI. */
export async function recordTakeover(
  client: Pick<Redis, "multi">,
  keys: RedisKeys,
  event: TakeoverEvent,
): Promise<void> {
  await client
    .multi()
    .hincrby(keys.claimCounters, `takeovers|${event.rebuild ?? ""}|${event.tenant ?? ""}`, 1)
    .xadd(
      keys.claimTakeovers,
      "MAXLEN",
      "~",
      TAKEOVERS_KEPT,
      "*",
      "claim",
      event.claim,
      "rebuild",
      event.rebuild ?? "",
      "tenant",
      event.tenant ?? "",
      "fence",
      String(event.fence),
      "previousFence",
      String(event.previousFence ?? ""),
      "jobId",
      event.jobId ?? "",
    )
    .exec();
}

/** One publish refused by the fence (a holder that lost its claim tried to publish). */
export async function recordFencingRejection(
  client: Pick<Redis, "hincrby">,
  keys: RedisKeys,
  claim: string,
): Promise<void> {
  await client.hincrby(keys.claimCounters, `fencing|${claim}`, 1);
}
