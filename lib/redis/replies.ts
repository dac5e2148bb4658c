/**
 * The reply codes of every claimwatch Lua script, in one place. Positive: done; 0: an expected
 * "no" that is not a failure; negative: why nothing (or not everything) was done. Scripts embed
 * these numbers in their source and headers; callers decode them with `replyCode`, never by
 * comparing literals.
 */
export const REPLY = {
  /** Done (written, released, refreshed, published). */
  done: 1,
  /** Done in the second way a script documents: acquire took over; publish saw its own retried call. */
  alsoDone: 2,
  /** An expected "no": held, kept, left alone. */
  no: 0,
  /** The key is gone (expired, trimmed, never written). */
  missing: -2,
  /** Another owner holds it (a claim token, a newer fence). */
  notOwner: -6,
  /** The record is in a final status: nothing of it changes any more. */
  final: -7,
  /** The status move is not an allowed transition. */
  refused: -8,
  /** A record with this id exists already. */
  exists: -9,
  /**
   * An operator force-released the claim: the holder must stop its work and acknowledge by
   * releasing; nobody else can take the claim until it has (or the release window ran out).
   */
  revoked: -10,
} as const;

/** The run scripts' codes (lib/runs/scripts.ts): the shared ones plus how an attempt began. */
export const RUN_REPLY = {
  written: REPLY.done,
  no: REPLY.no,
  missing: REPLY.missing,
  final: REPLY.final,
  refused: REPLY.refused,
  exists: REPLY.exists,
  /** RUN_WRITE, RUN_VERSION: the record was begun by another call than the writer's (its owner). */
  notOwner: REPLY.notOwner,
  began: 1,
  alreadyRebuilt: 2,
  ended: 3,
  /** TIMELINE_COUNT_RECORD: the record is still queued or running (its final write counts it). */
  notFinal: 4,
  /** RUN_BEGIN: the job has an operator's cancel request: recorded cancelled, nothing else done. */
  cancelled: 5,
} as const;

export type ReplyName = keyof typeof REPLY;

const NAMES = new Map<number, ReplyName>(Object.entries(REPLY).map(([name, code]) => [code, name as ReplyName]));

/**
 * A script's numeric reply (or the first element of a table reply) as its name. Anything else
 * means the script and its caller disagree: an invariant broke, so this throws.
 */
export function replyCode(script: string, reply: unknown): ReplyName {
  const raw = Array.isArray(reply) ? reply[0] : reply;
  const name = typeof raw === "number" ? NAMES.get(raw) : undefined;
  if (!name) throw new Error(`${script}: unexpected reply ${JSON.stringify(reply)}`);
  return name;
}
