/**
 * A worker that refuses its definitions file exits before it beats, so the dashboard only saw "no
 * worker is running … paused, killed or cut off" and advised starting one, which would fail the
 * same way (black-box helper-152). The refusing start leaves a note in the main Redis (best
 * effort: its Redis settings may be what is wrong); the health report names the file's problem
 * until a worker starts (and deletes it) or the note runs out.
 */
import type { Redis } from "ioredis";
import type { RedisKeys } from "../redis/keys";
import { formatDurationMs } from "../ui/format";

/** How long the note of a refused start is shown at most. */
export const WORKER_REFUSAL_TTL_MS = 3_600_000;

export interface WorkerRefusal {
  host: string;
  pid: number;
  /** The first problem, as the worker printed it (`claimwatch.yaml:64: rebuilds.x.claim…: …`). */
  problem: string;
  /** How long ago (from the note's remaining TTL: the Redis clock, no host's). */
  agoMs: number;
}

/** Leaves the note of a start that refused its definitions file. */
export async function recordWorkerRefusal(
  client: Pick<Redis, "set">,
  keys: RedisKeys,
  refusal: Omit<WorkerRefusal, "agoMs">,
): Promise<void> {
  await client.set(keys.workerRefusal, JSON.stringify(refusal), "PX", WORKER_REFUSAL_TTL_MS);
}

/** A worker started: the note, if any, is done with. */
export async function clearWorkerRefusal(client: Pick<Redis, "del">, keys: RedisKeys): Promise<void> {
  await client.del(keys.workerRefusal);
}

/** The note of the last refused start, or null (none, or unreadable). One pipeline. */
export async function readWorkerRefusal(
  client: Pick<Redis, "pipeline">,
  keys: RedisKeys,
): Promise<WorkerRefusal | null> {
  const replies = (await client.pipeline().get(keys.workerRefusal).pttl(keys.workerRefusal).exec()) ?? [];
  if (replies.some(([error]) => error)) return null;
  const raw = replies[0]?.[1];
  const pttl = Number(replies[1]?.[1]);
  if (typeof raw !== "string" || !(pttl > 0)) return null;
  try {
    const note = JSON.parse(raw) as Partial<WorkerRefusal>;
    if (typeof note.problem !== "string") return null;
    return {
      host: String(note.host ?? "?"),
      pid: Number(note.pid ?? 0),
      problem: note.problem.slice(0, 500),
      agoMs: Math.max(0, WORKER_REFUSAL_TTL_MS - pttl),
    };
  } catch {
    return null;
  }
}

/** The health problem of a refused start. */
export function refusalProblem(refusal: WorkerRefusal): string {
  return `A worker refused to start ${formatDurationMs(refusal.agoMs)} ago (${refusal.host}, pid ${refusal.pid}): its definitions file has a problem: ${refusal.problem}. Fix the file: npm start restarts its worker once the file is valid; a worker started otherwise must be started again`;
}
