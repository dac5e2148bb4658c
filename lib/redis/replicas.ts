/**
 * Asynchronous replication, made visible to one caller. A Redis primary answers a write before
 * its replicas have it; a failover promotes a replica, and what it had not received is gone — a
 * requested rebuild included. `WAIT n ms` asks the primary how many replicas have acknowledged
 * everything this connection wrote so far: with `CLAIMWATCH_TRIGGER_REPLICAS=n`, a trigger counts
 * as queued only once n replicas have it (RELIABILITY.md, "Sentinel"). Not strong consistency:
 * with `min-replicas-to-write` on the data servers, it bounds what a failover can lose to
 * requests nobody was told were queued.
 */
import type { Redis } from "ioredis";

/** How long a trigger waits for its replicas before it is answered "not replicated". */
export const REPLICA_WAIT_MS = 1_000;

/** Replicas that acknowledged this connection's writes within `timeoutMs` (WAIT); `wanted` 0 asks nothing. */
export async function acknowledgedReplicas(
  client: Pick<Redis, "call">,
  wanted: number,
  timeoutMs = REPLICA_WAIT_MS,
): Promise<number> {
  if (wanted <= 0) return 0;
  return Number(await client.call("WAIT", String(wanted), String(timeoutMs)));
}
