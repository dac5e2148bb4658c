/**
 * The main Redis's mark of a version rebuilt (its idempotency key), read with whether it counts
 * for a skip here: made in this Redis's incarnation by its lane's newest publish (scripts.ts,
 * REBUILT_MARK_LUA). A mark that does not count may be one a lost write would have removed; the
 * caller asks the claims Redis (lib/rebuilds/rebuilt-by-now.ts).
 */
import type { RedisKeys } from "../redis/keys";
import { runScript, type ScriptingClient } from "../redis/scripts";
import { READ_REBUILT_MARK, RUN_MARK_CONFIRMED } from "./scripts";

export interface RebuiltMark {
  /** The run that rebuilt the version (and published it). */
  by: string;
  /** Whether the mark counts for a skip without asking the claims Redis. */
  counts: boolean;
}

/**
 * The mark of `idempotencyKey` in its lane (the output's claim name), and `alongside` (a STRING key
 * read in the same round trip), each null when there is none.
 */
export async function readRebuiltMark(
  client: ScriptingClient,
  keys: RedisKeys,
  lane: { claim: string; idempotencyKey: string },
  alongside?: string,
): Promise<{ mark: RebuiltMark | null; alongside: string | null }> {
  const own = keys.idempotency(lane.idempotencyKey);
  const [by, counts, also] = await runScript(
    client,
    READ_REBUILT_MARK,
    [own, keys.rebuiltNow(lane.claim), alongside ?? own],
    [],
  );
  return { mark: by ? { by, counts: counts === 1 } : null, alongside: also || null };
}

/**
 * Makes a mark that did not count count again, once confirmed under its lane's held claim
 * (RUN_MARK_CONFIRMED): true when it does.
 */
export async function renewRebuiltMark(
  client: ScriptingClient,
  keys: RedisKeys,
  lane: { claim: string; idempotencyKey: string },
  confirmed: { by: string; fence: number; heldUntil: number },
): Promise<boolean> {
  if (!heldUntilArg(confirmed.heldUntil)) return false;
  const own = keys.idempotency(lane.idempotencyKey);
  const reply = await runScript(
    client,
    RUN_MARK_CONFIRMED,
    [own, keys.rebuiltNow(lane.claim)],
    [confirmed.by, confirmed.fence, heldUntilArg(confirmed.heldUntil)!],
  );
  return reply === 1;
}

/** A claim's held-until time (ms, the main Redis's clock) as a script argument; null when it is no sane time. */
export function heldUntilArg(ms: number): string | null {
  const whole = Math.floor(ms);
  return Number.isSafeInteger(whole) && whole > 0 ? String(whole) : null;
}
