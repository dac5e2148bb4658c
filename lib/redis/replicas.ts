/**
 * Asynchronous replication, made visible to one caller. A Redis primary answers a write before
 * its replicas have it; a failover promotes a replica, and what it had not received is gone — a
 * requested rebuild included. `WAIT n ms` asks the primary how many replicas have acknowledged
 * everything this connection wrote so far: with `CLAIMWATCH_TRIGGER_REPLICAS=n`, a trigger counts
 * as queued only once n replicas have it (RELIABILITY.md, "Sentinel"). Not strong consistency:
 * with `min-replicas-to-write` on the data servers, it bounds what a failover can lose to
 * requests nobody was told were queued.
 *
 * The cost: a WAIT holds its connection — and every command queued behind it on that
 * connection, in the web server all of its Redis reads — until the replicas answer or
 * `REPLICA_WAIT_MS` passes. In sync that is a round trip; with a replica down, each trigger stalls
 * the connection for up to a second (RELIABILITY.md, "Sentinel").
 */
import type { Redis } from "ioredis";

/** How long a trigger waits for its replicas before it is answered "not replicated". */
export const REPLICA_WAIT_MS = 1_000;

const epochs = new WeakMap<object, { n: number }>();

/**
 * How many times `client` has (re)connected since this was first asked of it. WAIT counts the
 * writes of one connection: a write made before a reconnect — to a primary that may be gone
 * since — is not what a WAIT sent after it measures (ioredis resends an unanswered WAIT on the
 * new connection, after a failover on the new primary). Take it before the writes, hand it to
 * `acknowledgedReplicas`.
 */
export function connectionEpoch(client: Pick<Redis, "on">): number {
  let epoch = epochs.get(client);
  if (!epoch) {
    const counter = { n: 0 };
    epoch = counter;
    epochs.set(client, counter);
    client.on("ready", () => void (counter.n += 1));
  }
  return epoch.n;
}

/**
 * Replicas that acknowledged this connection's writes within `timeoutMs` (WAIT); `wanted` 0 asks
 * nothing. 0 when the connection was re-established since `epoch` (`connectionEpoch`, taken
 * before the writes): what the WAIT measured is then not those writes.
 */
export async function acknowledgedReplicas(
  client: Pick<Redis, "call" | "on">,
  wanted: number,
  epoch: number,
  timeoutMs = REPLICA_WAIT_MS,
): Promise<number> {
  if (wanted <= 0) return 0;
  const acknowledged = Number(await client.call("WAIT", String(wanted), String(timeoutMs)));
  return connectionEpoch(client) === epoch ? acknowledged : 0;
}
