/**
 * A cancel request: what the API leaves for the worker that runs (or will run) a job. The API
 * does not know which worker holds a job, so the request is a key by job id: every worker polls
 * the keys of its active jobs (`CancelWatch`, twice a second) and checks once when it picks a job
 * up — a job redelivered to another worker, or moved to delayed and picked up again, is cancelled
 * there. The key outlives the job's attempts (TTL), so a late pickup still finds it.
 *
 * The operator's action (audit, removing a waiting job) is lib/operations/cancel.ts.
 */
import type { Redis } from "ioredis";
import { z } from "zod";
import type { RedisKeys } from "../redis/keys";
import { parseStoredJson } from "../redis/stored-json";

/** Long enough for any retry backoff or deferral the job may sit in; a finished job ignores it. */
export const CANCEL_REQUEST_TTL_MS = 86_400_000;
/** How often a worker looks for cancel requests of its active jobs (the cancel's latency). */
export const CANCEL_POLL_MS = 500;
/** The reason BullMQ's job signal is aborted with when a cancel request is found. */
export const CANCEL_ABORT_REASON = "cancelled";

const cancelRequest = z.object({
  actor: z.string(),
  reason: z.string(),
  at: z.number(),
});
export type CancelRequest = z.output<typeof cancelRequest>;

/**
 * Stores an operator's cancel request unless the job has one already: the first request is the
 * one its run record names (a second cancel does not rewrite who cancelled it, or why). Returns
 * the request in force: `request` itself, or the earlier one.
 */
export async function writeCancelRequest(
  client: Pick<Redis, "set" | "get">,
  keys: RedisKeys,
  jobId: string,
  request: CancelRequest,
): Promise<CancelRequest> {
  const key = keys.cancelRequest(jobId);
  // Two commands, not SET NX GET (Redis 7 only): the request is never removed while a job lives.
  if ((await client.set(key, JSON.stringify(request), "PX", CANCEL_REQUEST_TTL_MS, "NX")) === "OK") return request;
  return parseCancelRequest(await client.get(key)) ?? request;
}

/**
 * A request key whose value cannot be read (a foreign writer, a damaged key) still cancels:
 * RUN_BEGIN treats it so, and the watch and the check before the publish must agree with it.
 */
export const UNREADABLE_CANCEL_REQUEST: CancelRequest = Object.freeze({ actor: "an operator", reason: "", at: 0 });

/** The request a cancel key holds: null only when there is none. */
export function parseCancelRequest(raw: string | null | undefined): CancelRequest | null {
  if (!raw) return null;
  return parseStoredJson(cancelRequest, raw) ?? UNREADABLE_CANCEL_REQUEST;
}

export async function readCancelRequest(
  client: Pick<Redis, "get">,
  keys: RedisKeys,
  jobId: string,
): Promise<CancelRequest | null> {
  return parseCancelRequest(await client.get(keys.cancelRequest(jobId)));
}

/** Notes that an operator's cancel ended job `jobId` (lib/rebuilds/trigger.ts `endedByCancel`). */
export async function noteCancelEnded(client: Pick<Redis, "set">, keys: RedisKeys, jobId: string): Promise<void> {
  await client.set(keys.cancelEnded(jobId), "1", "PX", CANCEL_REQUEST_TTL_MS);
}

/** The run record's reason for a cancelled attempt (as RUN_BEGIN words it, lib/runs/scripts.ts). */
export function describeCancel(request: CancelRequest): string {
  return request.reason ? `cancelled by ${request.actor}: ${request.reason}` : `cancelled by ${request.actor}`;
}

/**
 * A worker's watch over its active jobs: every `everyMs` one MGET of their cancel keys; a job
 * with a request is reported once (`onCancel`), and its request is kept for the processor to
 * word the record (`requestFor`) until `forget`.
 */
export class CancelWatch {
  private readonly seen = new Map<string, CancelRequest>();
  private timer: NodeJS.Timeout | undefined;
  private polling = false;

  constructor(
    private readonly client: Pick<Redis, "mget">,
    private readonly keys: RedisKeys,
    private readonly activeJobIds: () => string[],
    private readonly onCancel: (jobId: string, request: CancelRequest) => void,
    private readonly everyMs = CANCEL_POLL_MS,
  ) {}

  start(): void {
    this.timer = setInterval(() => void this.poll(), this.everyMs);
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
  }

  /** A request found for `jobId` (by the watch or by the processor's own check). */
  note(jobId: string, request: CancelRequest): void {
    if (this.seen.has(jobId)) return;
    this.seen.set(jobId, request);
    this.onCancel(jobId, request);
  }

  requestFor(jobId: string): CancelRequest | null {
    return this.seen.get(jobId) ?? null;
  }

  forget(jobId: string): void {
    this.seen.delete(jobId);
  }

  private async poll(): Promise<void> {
    if (this.polling) return;
    const ids = this.activeJobIds().filter((id) => !this.seen.has(id));
    if (ids.length === 0) return;
    this.polling = true;
    try {
      const replies = await this.client.mget(...ids.map((id) => this.keys.cancelRequest(id)));
      ids.forEach((id, i) => {
        const request = parseCancelRequest(replies[i]);
        if (request) this.note(id, request);
      });
    } catch {
      // Redis away: the next poll asks again (the job's own work fails or waits meanwhile).
    } finally {
      this.polling = false;
    }
  }
}

/**
 * Notes that lost job `jobId`'s request was queued again as `requeuedAs`, then carries a cancel
 * of `jobId` that came meanwhile over to it (a cancel that came before the note follows no link).
 */
export async function noteRequeued(
  client: Pick<Redis, "set" | "get">,
  keys: RedisKeys,
  jobId: string,
  requeuedAs: string,
): Promise<void> {
  await client.set(keys.requeuedAs(jobId), requeuedAs, "PX", CANCEL_REQUEST_TTL_MS);
  const cancelled = parseCancelRequest(await client.get(keys.cancelRequest(jobId)));
  if (cancelled) await writeCancelRequest(client, keys, requeuedAs, cancelled);
}
