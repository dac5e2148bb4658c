/**
 * On-demand runs for the API and the UI. Duplicate triggers of the same (rebuild, tenant,
 * version, force) while one is still waiting collapse into that job; once it runs, a new
 * trigger queues a new job (which the claim and the idempotency key then make harmless).
 * `force` skips the idempotency key, never the claim.
 */
import { declareTarget } from "./declared";
import crypto from "node:crypto";
import type { Queue } from "bullmq";
import type { Redis } from "ioredis";
import type { RedisKeys } from "../redis/keys";
import { runScript } from "../redis/scripts";
import { acknowledgedReplicas, connectionEpoch, REPLICA_WAIT_MS } from "../redis/replicas";
import { publishEvent } from "../events/publish";
import { tenantProblem, unknownRebuildProblem, type Definitions } from "./definitions";
import { jobOptionsFor, type RebuildJobData } from "./queue";
import { REQUEST_ID_RENAME, REQUEST_ID_TAKE } from "./scripts";
import { VERSION_PATTERN } from "./version";

export interface TriggerRequest {
  tenant?: string;
  version?: string;
  force?: boolean;
  trigger?: RebuildJobData["trigger"];
  requestedBy?: string;
  /**
   * The caller's id for this request (a form's submit): the same id again within
   * `REQUEST_ID_TTL_MS` answers with the job it queued, whatever the queue holds by then. The same
   * id for another request (another rebuild, tenant, version, force or retried run) is refused
   * (`request-id-reused`): answering it with the first request's job would drop it unseen.
   */
  requestId?: string;
  /** The run this job retries (lib/operations/retry). */
  retryOf?: string;
  /**
   * Replicas of the main Redis that must have the job before it is answered as queued
   * (`CLAIMWATCH_TRIGGER_REPLICAS`; lib/redis/replicas.ts). Fewer within `REPLICA_WAIT_MS`:
   * `not-replicated` — a failover now could lose the job, so the caller should send it again.
   */
  replicas?: number;
}

export type TriggerResult =
  | { status: "queued" | "deduplicated"; jobId: string }
  | { status: "unknown-rebuild"; message: string }
  | { status: "unknown-tenant"; message: string }
  | { status: "invalid-version"; message: string }
  | { status: "invalid-request-id"; message: string }
  /** The request id named another request within REQUEST_ID_TTL_MS: nothing queued. */
  | { status: "request-id-reused"; message: string }
  /**
   * The request id's job was cancelled by an operator (`jobId`): nothing queued — a resend of a
   * cancelled request stays cancelled — and not answered "deduplicated" with a job that will never
   * run (black-box helper-178).
   */
  | { status: "request-cancelled"; jobId: string; message: string }
  | { status: "not-replicated"; jobId: string; replicas: number; acknowledged: number; message: string };

/** How long a request id is remembered: a form resubmitted later than this queues again. */
export const REQUEST_ID_TTL_MS = 10 * 60_000;
export const REQUEST_ID_PATTERN = /^[A-Za-z0-9_-]{8,64}$/;

/** How long a "waiting trigger" marker lives at most (a job that waits longer is re-checked). */
const PENDING_TTL_MS = 86_400_000;
const WAITING_STATES = new Set(["waiting", "delayed", "prioritized", "waiting-children"]);

/**
 * Whether an operator's cancel ended job `jobId` (`cancelEnded`: written when a cancel removed the
 * waiting job, or its worker ended it cancelled). A cancel request alone is not enough: one is
 * written for a job that finished first (review helper-179: a rebuilt request's resend was
 * answered request-cancelled).
 */
async function endedByCancel(client: Pick<Redis, "exists">, keys: RedisKeys, jobId: string): Promise<boolean> {
  return (await client.exists(keys.cancelEnded(jobId))) === 1;
}

export async function triggerRebuild(
  queue: Pick<Queue, "add" | "getJobState">,
  /** The main Redis; `queue` writes through this same connection (so WAIT covers the job). */
  client: Pick<
    Redis,
    "set" | "get" | "exists" | "pexpire" | "hset" | "call" | "on" | "defineCommand" | "multi" | "decr"
  >,
  keys: RedisKeys,
  definitions: Definitions,
  name: string,
  request: TriggerRequest = {},
): Promise<TriggerResult> {
  const definition = definitions.rebuilds.get(name);
  if (!definition) return { status: "unknown-rebuild", message: unknownRebuildProblem(definitions, name) };
  const { tenant, version } = request;
  const tenantError = tenantProblem(definition, tenant);
  if (tenantError) return { status: "unknown-tenant", message: tenantError };
  if (version !== undefined && !VERSION_PATTERN.test(version)) {
    return { status: "invalid-version", message: "version must be 1-128 letters, digits or . _ : + -" };
  }
  const force = request.force ?? false;
  // Taken before any write: a reconnect after it means the WAIT cannot vouch for them.
  const epoch = request.replicas ? connectionEpoch(client) : 0;
  const pendingKey = keys.pendingTrigger(name, tenant, version, force);
  const jobId = `run-${crypto.randomUUID()}`;

  // One job per request id: a double submit (two clicks, a retried POST) gets the first job back.
  let requestKey: string | null = null;
  let whatKey: string | null = null;
  if (request.requestId !== undefined) {
    if (!REQUEST_ID_PATTERN.test(request.requestId)) {
      return { status: "invalid-request-id", message: "requestId must be 8-64 letters, digits, _ or -" };
    }
    const hash = crypto
      .createHash("sha256")
      .update(`${request.requestedBy ?? ""}\u0000${request.requestId}`)
      .digest("hex");
    requestKey = keys.triggerRequest(hash);
    // What the id stands for is kept beside it (its value stays the bare job id, as earlier
    // versions read it during a rolling deploy), taken with it in one script.
    whatKey = keys.triggerRequestWhat(hash);
    const what = requestFingerprint(name, request);
    const [taken, held, holder] = await runScript(
      client,
      REQUEST_ID_TAKE,
      [requestKey, whatKey],
      [jobId, what, REQUEST_ID_TTL_MS],
    );
    if (!taken) {
      const earlier: string | null = held || null;
      if (holder === "other") return reusedRequestId(request.requestId);
      // With replicas asked for, a request sent again after "not replicated" may find the id a
      // failover kept and the job it lost: then it queues, rather than answer with nothing. Not
      // without (a job cancelled or pruned meanwhile is gone too, and must stay gone), nor for a
      // job being cancelled.
      const lost =
        earlier !== null &&
        (request.replicas ?? 0) > 0 &&
        (await queue.getJobState(earlier)) === "unknown" &&
        !(await client.exists(keys.cancelRequest(earlier)));
      if (earlier && !lost) {
        if (await endedByCancel(client, keys, earlier)) {
          return {
            status: "request-cancelled",
            jobId: earlier,
            message: `request id ${request.requestId} named job ${earlier}, which an operator cancelled: nothing queued (send a new request id to ask again)`,
          };
        }
        // A write before the WAIT: replicas that acknowledge it have the earlier job too.
        if (request.replicas) {
          await Promise.all([
            client.set(requestKey, earlier, "PX", REQUEST_ID_TTL_MS, "XX"),
            client.pexpire(whatKey, REQUEST_ID_TTL_MS), // the two live as long
          ]);
        }
        return replicated(client, request, epoch, { status: "deduplicated", jobId: earlier });
      }
      // Only if the id still names the lost job (or expired meanwhile): of two submits of one id
      // at once, one queues and the other is answered with its job.
      const [named, namedHolder] = await runScript(
        client,
        REQUEST_ID_RENAME,
        [requestKey, whatKey],
        [earlier ?? "", jobId, REQUEST_ID_TTL_MS, what],
      );
      if (namedHolder === "other") return reusedRequestId(request.requestId);
      if (named !== jobId) {
        // The other resend's job may not be queued yet, or never (it joined a waiting job, or its
        // server died): answer with it only once it exists; else "not replicated", sent again.
        if ((await queue.getJobState(named)) !== "unknown")
          return replicated(client, request, epoch, { status: "deduplicated", jobId: named });
        return {
          status: "not-replicated",
          jobId: named,
          replicas: request.replicas ?? 0,
          acknowledged: 0,
          message: `job ${named} of this request id is not queued yet: send the request again (a repeat is harmless)`,
        };
      }
    }
  }

  // Claim the "waiting trigger" marker; if another trigger holds it and its job still waits, reuse it.
  if (!(await client.set(pendingKey, jobId, "PX", PENDING_TTL_MS, "NX"))) {
    const existing = await client.get(pendingKey);
    // A job found waiting answers this request too: a new mark (a token its publish keeps), so
    // that a run of it the queue's Redis brings back after that publish, finding a mark it did not
    // publish with, publishes again rather than leave this request unanswered. Set before the
    // job's state is looked at: a pickup after that look sees it (helper-108). A job that is not
    // joined (it started meanwhile) gets a mark too: at worst a repeat after a crash, never a loss.
    if (existing) await client.set(keys.askedAgain(existing), crypto.randomUUID(), "PX", PENDING_TTL_MS);
    // Never fold a request into a job an operator is cancelling: it would be lost with it.
    // Counted before the looks that decide the join (and taken back when it is refused): a cancel
    // reads the count after it removed the job, so a join it ends is in its count (review
    // helper-179: counted after the looks, a join racing the cancel ended uncounted).
    if (existing)
      await client
        .multi()
        .incr(keys.joinedRequests(existing))
        .pexpire(keys.joinedRequests(existing), PENDING_TTL_MS)
        .exec();
    const cancelling = existing ? await client.exists(keys.cancelRequest(existing)) : 0;
    const joins = existing && !cancelling && WAITING_STATES.has(await queue.getJobState(existing));
    if (existing && !joins) await client.decr(keys.joinedRequests(existing)).catch(() => 0);
    if (existing && joins) {
      if (requestKey && whatKey) {
        await Promise.all([
          client.set(requestKey, existing, "PX", REQUEST_ID_TTL_MS),
          client.pexpire(whatKey, REQUEST_ID_TTL_MS), // the two live as long
        ]);
      }
      // A write before the WAIT (replication is ordered: what acknowledges it has the job too).
      else if (request.replicas) await client.pexpire(pendingKey, PENDING_TTL_MS);
      return replicated(client, request, epoch, { status: "deduplicated", jobId: existing });
    }
    await client.set(pendingKey, jobId, "PX", PENDING_TTL_MS);
  }
  const data: RebuildJobData = {
    rebuild: name,
    ...(tenant ? { tenant } : {}),
    ...(version ? { version } : {}),
    force,
    trigger: request.trigger ?? "api",
    ...(request.requestedBy ? { requestedBy: request.requestedBy } : {}),
    ...(request.retryOf ? { retryOf: request.retryOf } : {}),
  };
  // Before the job can be picked up: a worker whose definitions lack it keeps it (a rolling deploy).
  await declareTarget(client, keys, name, tenant);
  await queue.add(name, data, { ...jobOptionsFor(definition, definitions.retention), jobId });
  void publishEvent(client, keys, { type: "run.queued", jobId, rebuild: name, tenant: tenant ?? null });
  return replicated(client, request, epoch, { status: "queued", jobId });
}

/** A request id that named another request lately: refused, nothing queued. */
const reusedRequestId = (requestId: string): TriggerResult => ({
  status: "request-id-reused",
  message:
    `requestId '${requestId}' was used within the last ${REQUEST_ID_TTL_MS / 60_000} min for another ` +
    "request (another rebuild, tenant, version, force or retried run): nothing was queued; a new request needs a new id",
});

/**
 * What a request id stands for, besides its job (keys.triggerRequestWhat): the request's rebuild,
 * tenant, version, force and retried run, hashed (16 hex digits).
 */
function requestFingerprint(name: string, request: TriggerRequest): string {
  const what = [name, request.tenant ?? "", request.version ?? "", request.force ? "1" : "", request.retryOf ?? ""];
  return crypto.createHash("sha256").update(JSON.stringify(what)).digest("hex").slice(0, 16);
}

/**
 * `answer` once `request.replicas` replicas have what this connection wrote (the job, or for a
 * deduplicated answer a write made after the job was found), else `not-replicated`.
 */
async function replicated(
  client: Pick<Redis, "call" | "on">,
  request: TriggerRequest,
  epoch: number,
  answer: { status: "queued" | "deduplicated"; jobId: string },
): Promise<TriggerResult> {
  const replicas = request.replicas ?? 0;
  if (replicas === 0) return answer;
  const acknowledged = await acknowledgedReplicas(client, replicas, epoch);
  if (acknowledged >= replicas) return answer;
  return {
    status: "not-replicated",
    jobId: answer.jobId,
    replicas,
    acknowledged,
    message:
      `job ${answer.jobId} reached the Redis primary, but ${acknowledged} of the ${replicas} replicas ` +
      `(CLAIMWATCH_TRIGGER_REPLICAS) acknowledged it within ${REPLICA_WAIT_MS} ms: a failover now could lose it. ` +
      "Send the request again: a repeat is harmless",
  };
}

/**
 * Drops the job's marker when it is still this job's: later triggers must queue a new job. The
 * worker calls it for a forced job when it starts and for a job that failed early; any other
 * job drops its marker in its idempotency check (SKIP_IF_REBUILT).
 */
export async function clearPendingTrigger(
  client: Pick<Redis, "get" | "del">,
  keys: RedisKeys,
  data: RebuildJobData,
  jobId: string,
): Promise<void> {
  const key = keys.pendingTrigger(data.rebuild, data.tenant, data.version, data.force);
  // A benign race: a trigger that replaced the marker between GET and DEL loses its marker, and
  // the next duplicate trigger queues a job that the claim/idempotency key then skips.
  if ((await client.get(key)) === jobId) await client.del(key);
}
