/**
 * Whether a version is rebuilt now — the run whose build of it the output serves — as the
 * worker's check under the claim, a lost claim's decision and the "Rebuild now" preview ask it:
 * the main Redis's mark when it counts (made in this Redis's incarnation by its lane's newest
 * publish), else the claims Redis's published pointer, which names the run that published last
 * (a main Redis that lost writes may still mark a version another has been published over:
 * helper-142; the claims Redis is the one that decides who publishes).
 */
import type { Redis } from "ioredis";
import { readPublished } from "../claims/publish";
import type { RedisKeys } from "../redis/keys";
import { readRebuiltMark, type RebuiltMark } from "../runs/rebuilt-mark";

export interface RebuiltLane {
  rebuild: string;
  tenant: string | null | undefined;
  idempotencyKey: string;
  /** The claim name of the lane's output (its published pointer's name). */
  claim: string;
}

/** The run that rebuilt the lane's version if the output serves its build now (above), else null. */
export async function confirmRebuilt(
  claims: Pick<Redis, "hgetall">,
  keys: RedisKeys,
  claim: string,
  mark: RebuiltMark | null,
): Promise<string | null> {
  if (!mark) return null;
  if (mark.counts) return mark.by;
  const pointer = await readPublished(claims, keys, claim);
  return pointer?.runId === mark.by ? mark.by : null;
}

/** `readRebuiltMark` then `confirmRebuilt`: two round trips at most (the second only for a mark that does not count). */
export async function rebuiltByNow(
  connections: { main: Redis; claims: Pick<Redis, "hgetall">; keys: RedisKeys },
  lane: RebuiltLane,
): Promise<string | null> {
  const { mark } = await readRebuiltMark(connections.main, connections.keys, lane);
  return confirmRebuilt(connections.claims, connections.keys, lane.claim, mark);
}
