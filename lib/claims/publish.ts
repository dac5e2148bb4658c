/**
 * Fenced publish: the published pointer of a claim name moves only for the newest grant.
 * A holder that was paused, cut off or taken over still has its old fence, and is refused here
 * even in the window before it notices its loss — the lock alone cannot give that guarantee.
 */
import type { Redis } from "ioredis";
import { recordFencingRejection } from "../metrics/counters";
import type { RedisKeys } from "../redis/keys";
import { FENCED_PUBLISH, runScript, type ScriptingClient } from "../redis/scripts";
import { toNumberOrNull, unexpectedReply } from "./holder";
import { REPLY } from "../redis/replies";

export interface PublishRequest {
  name: string;
  /** The fence of the caller's grant (`acquireClaim` / `withClaim`). */
  fence: number;
  /** The owner token of that grant: a holder whose claim was force-released or expired is refused. */
  token: string;
  /** What is published: a build id, content hash or output path. */
  value: string;
  runId?: string;
  /** "<run id> <version> <mark>": kept in the name's list of recent publishes (keys.publishedRuns). */
  listed?: string;
}

export type PublishResult =
  | {
      status: "published";
      publishedAt: number;
      /** This fence had already published this exact value (a retried call); nothing changed. */
      repeated: boolean;
    }
  | {
      status: "superseded";
      /**
       * Newest fence issued for the claim; a caller below it has been replaced. A caller at it
       * no longer holds the claim (force-released or expired).
       */
      newestFence: number;
      /** Fence of what is published now (0: nothing yet). */
      publishedFence: number;
    };

export interface PublishedPointer {
  fence: number;
  value: string;
  runId: string | null;
  publishedAt: number;
}

export async function publishFenced(
  /** With `hincrby`, a refused publish is also counted (claimwatch_fencing_rejections_total). */
  client: ScriptingClient & Partial<Pick<Redis, "hincrby">>,
  keys: RedisKeys,
  request: PublishRequest,
): Promise<PublishResult> {
  if (!Number.isSafeInteger(request.fence) || request.fence <= 0) {
    throw new RangeError(`fence must be a positive whole number (got ${request.fence})`);
  }
  const reply = await runScript(
    client,
    FENCED_PUBLISH,
    [
      keys.claimFence(request.name),
      keys.published(request.name),
      keys.claimSkips,
      keys.claim(request.name),
      keys.publishedRuns(request.name),
    ],
    [request.fence, request.value, request.runId ?? "", request.name, request.token, request.listed ?? ""],
  );
  if (!Array.isArray(reply)) throw unexpectedReply("publish", reply);
  const [code] = reply;
  if (code === REPLY.done || code === REPLY.alsoDone) {
    return { status: "published", publishedAt: Number(reply[1]), repeated: code === REPLY.alsoDone };
  }
  if (code === REPLY.notOwner) {
    if (client.hincrby)
      await recordFencingRejection(client as Pick<Redis, "hincrby">, keys, request.name).catch(() => {});
    return { status: "superseded", newestFence: Number(reply[1]), publishedFence: Number(reply[2]) };
  }
  throw unexpectedReply("publish", reply);
}

/** What is published for a claim name now, or `null`. */
export async function readPublished(
  client: Pick<Redis, "hgetall">,
  keys: RedisKeys,
  name: string,
): Promise<PublishedPointer | null> {
  const hash = await client.hgetall(keys.published(name));
  if (!hash.fence || hash.value === undefined) return null;
  return {
    fence: Number(hash.fence),
    value: hash.value,
    runId: hash.runId || null,
    publishedAt: toNumberOrNull(hash.publishedAt) ?? 0,
  };
}

/**
 * The publish `runId` made of claim name `name`, as the claims Redis's list of recent publishes
 * (keys.publishedRuns, pushed by the publish itself) keeps it, or `null` when the list does not
 * name the run (no publish of its own, pushed by an earlier version without the fields, or past
 * the last PUBLISHED_RUNS_KEPT). It outlives the pointer: it still names a publish after a newer
 * fence's moved the pointer on.
 */
export async function readListedPublish(
  client: Pick<Redis, "lrange">,
  keys: RedisKeys,
  name: string,
  runId: string,
  /** Only a publish of this version with this mark (one run id may publish twice: a pickup the queue's Redis forgot). */
  of?: { version: string; mark: string | null },
): Promise<ListedPublish | null> {
  for (const line of await client.lrange(keys.publishedRuns(name), 0, -1)) {
    // "<run id> <version> <mark> <fence> <value> <publishedAt>" (FENCED_PUBLISH)
    const fields = line.split(" ");
    if (fields[0] !== runId || fields.length < 6) continue;
    if (of && (fields[1] !== of.version || fields[2] !== (of.mark ?? "-"))) continue;
    const fence = Number(fields[3]);
    const publishedAt = Number(fields.at(-1));
    const value = fields.slice(4, -1).join(" ");
    if (Number.isSafeInteger(fence) && fence > 0 && Number.isSafeInteger(publishedAt) && value)
      return { fence, value, publishedAt, version: fields[1]!, mark: fields[2] === "-" ? null : fields[2]! };
  }
  return null;
}

/** A publish as the claims Redis's list keeps it: its pointer, and the version and mark its run had. */
export type ListedPublish = Omit<PublishedPointer, "runId"> & { version: string; mark: string | null };
