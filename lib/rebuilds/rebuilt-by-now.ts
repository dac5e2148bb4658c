/**
 * Whether a version is rebuilt now — the run whose build of it the output serves — as the
 * worker's check under the claim, a lost claim's decision and the "Rebuild now" preview ask it:
 * the main Redis's mark when it counts (made in this Redis's incarnation by its lane's newest
 * publish), else the claims Redis's published pointer, when it names the marked run and the
 * output's own fence record is that very publish, with no grant marked above it. A main Redis that
 * lost writes may still mark a version another has been published over (helper-142); when the
 * claims Redis lost them too (the same server, the default: review helper-144), its pointer is
 * behind the output's fence record, or a grant is (a publish under way: review helper-145).
 */
import type { Redis } from "ioredis";
import { readPublished } from "../claims/publish";
import type { RedisKeys } from "../redis/keys";
import { readRebuiltMark, renewRebuiltMark, type RebuiltMark } from "../runs/rebuilt-mark";
import { highestFenceMark, readPublishedFence } from "./published-fence";

export interface RebuiltLane {
  rebuild: string;
  tenant: string | null | undefined;
  idempotencyKey: string;
  /** The claim name of the lane's output (its published pointer's name). */
  claim: string;
  /** The output directory of the lane (its fence record). */
  outputDir: string;
}

/** A mark confirmed: the run, and the fence its publish has (undefined: the mark counted as it was). */
export interface Confirmed {
  by: string;
  fence?: number;
}

/**
 * The run that rebuilt the lane's version if the output serves its build now (above), else null.
 * Throws when the claims Redis or the output's directory cannot be read (callers count that as
 * not rebuilt: a repeat, never a lost request).
 */
export async function confirmRebuilt(
  claims: Pick<Redis, "hgetall">,
  keys: RedisKeys,
  lane: Pick<RebuiltLane, "claim" | "outputDir">,
  mark: RebuiltMark | null,
  ownFence?: number,
): Promise<Confirmed | null> {
  if (!mark) return null;
  if (mark.counts) return { by: mark.by };
  const [pointer, recorded, marked] = await Promise.all([
    readPublished(claims, keys, lane.claim),
    readPublishedFence(lane.outputDir),
    highestFenceMark(lane.outputDir, ownFence),
  ]);
  if (!pointer || pointer.runId !== mark.by) return null;
  // The output's own record must be this very publish: a newer one, another build with its fence,
  // or none at all (a directory this host does not see) is no confirmation (reviews helper-144,
  // helper-145). Nor is a grant above it: a publish under way whose record is not on the disk yet.
  if (!recorded || recorded.fence !== pointer.fence || recorded.hash !== pointer.value) return null;
  if (marked > pointer.fence) return null;
  return { by: mark.by, fence: pointer.fence };
}

/**
 * `readRebuiltMark` then `confirmRebuilt`: the run, or null — also when the confirmation cannot
 * be read (a repeat, never a lost request). Throws when the main Redis does not answer.
 */
export async function rebuiltByNow(
  connections: { main: Redis; claims: Pick<Redis, "hgetall">; keys: RedisKeys },
  lane: RebuiltLane,
): Promise<string | null> {
  const { mark } = await readRebuiltMark(connections.main, connections.keys, lane);
  const confirmed = await confirmRebuilt(connections.claims, connections.keys, lane, mark).catch(() => null);
  return confirmed?.by ?? null;
}

/**
 * `confirmRebuilt` under the lane's held claim: a mark confirmed from the claims Redis and the
 * disk is made to count again (RUN_MARK_CONFIRMED), so the next request skips at once; failures
 * of that leave it as it was.
 */
export async function confirmRebuiltHeld(
  connections: { main: Redis; claims: Pick<Redis, "hgetall">; keys: RedisKeys },
  lane: RebuiltLane,
  mark: RebuiltMark | null,
  held: { fence: number; heldUntil: () => number | null },
): Promise<string | null> {
  const confirmed = await confirmRebuilt(connections.claims, connections.keys, lane, mark, held.fence);
  // Made to count only while the claim is still held when the script applies (review helper-145:
  // a holder paused past it, another publish and a crash could otherwise bring the mark back).
  const heldUntil = held.heldUntil();
  if (confirmed?.fence !== undefined && heldUntil !== null)
    await renewRebuiltMark(connections.main, connections.keys, lane, {
      by: confirmed.by,
      fence: confirmed.fence,
      heldUntil,
    }).catch(() => {});
  return confirmed?.by ?? null;
}
