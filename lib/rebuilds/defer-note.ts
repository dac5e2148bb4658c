/**
 * Why a job waits in delayed when no run record can say it: a pickup that found its attempt's
 * record another pickup's, or an earlier pickup of the job still running on its worker, defers
 * the job without a record of its own. The worker leaves this note; the queue view shows it for
 * the delay it was written with (a later deferral or backoff makes it stale: `until` differs).
 */
import type { Redis } from "ioredis";
import { z } from "zod";
import type { RedisKeys } from "../redis/keys";
import { parseStoredJson } from "../redis/stored-json";

const deferNote = z.object({ reason: z.string(), until: z.number() });
export type DeferNote = z.infer<typeof deferNote>;

/** Kept a minute past the delay, then gone by itself. */
const NOTE_KEPT_AFTER_MS = 60_000;

export async function writeDeferNote(
  main: Pick<Redis, "set">,
  keys: RedisKeys,
  jobId: string,
  note: DeferNote,
): Promise<void> {
  const ttlMs = Math.max(1, note.until - Date.now()) + NOTE_KEPT_AFTER_MS;
  await main.set(keys.deferNote(jobId), JSON.stringify(note), "PX", Math.round(ttlMs));
}

/** The note, or null when absent or unreadable (written by another version, say). */
export function parseDeferNote(raw: string | null | undefined): DeferNote | null {
  return raw ? (parseStoredJson(deferNote, raw) ?? null) : null;
}
