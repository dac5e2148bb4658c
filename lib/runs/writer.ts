/**
 * The one writer of run records. An attempt begins with `beginAttempt` (one round trip that may
 * also end it: already rebuilt, failed early, deferred) and then writes through a `RunRecorder`,
 * which coalesces progress, step and log writes (one in flight at a time) and sends the final
 * record, its last log lines and the idempotency key in one script. The scripts refuse moves
 * outside `RUN_TRANSITIONS`, so a late writer (a paused attempt waking up) cannot change a
 * final record, and a record that was trimmed is never recreated half-empty.
 */
import crypto from "node:crypto";
import type { ChainableCommander, Redis } from "ioredis";
import { encodeEvent } from "../events/publish";
import type { StoredEvent } from "../events/types";
import type { RedisKeys } from "../redis/keys";
import { RUN_REPLY } from "../redis/replies";
import { runScript, runVariadicScript, type ScriptingClient } from "../redis/scripts";
import { abandonRun } from "./abandoned";
import {
  ALREADY_REBUILT_REASON,
  fieldPairs,
  indexLayout,
  keepNewestLines,
  RUN_LOG_LINES,
  recordTtlMs,
  runPlaceOf,
  toFields,
  NOT_ASKED,
  UNPROVEN,
  type PublishProof,
  type RunPlace,
  type RunRetention,
} from "./records";
import { RUN_BEGIN, RUN_NOTE_MADE_CURRENT, RUN_VERSION, RUN_WRITE } from "./scripts";
import { queueTimelineCount, timelineSpec } from "./timeline-counters";
import { isFinalStatus, type FinalRunStatus } from "./transitions";
import { RUN_STATUSES, type RunRecord, type RunStatus, type RunTrigger } from "./types";
import { heldUntilArg } from "./rebuilt-mark";

export interface RunStore {
  /** The main Redis. */
  client: ScriptingClient & Pick<Redis, "hget">;
  keys: RedisKeys;
  retention: RunRetention;
}

/**
 * The lane of a run's publishes: its output's claim name (keys.rebuiltNow), once its definition is
 * known (absent: its writes touch no lane: an attempt of a rebuild this worker does not declare).
 */
export interface RunLane {
  lane?: string | null;
}

/** Who an attempt is: what every record of it says from its first write on. */
export interface AttemptIdentity extends RunPlace, RunLane {
  runId: string;
  jobId: string;
  attempt: number;
  /** The job's previous attempt's run id (null for the first). */
  previousRunId: string | null;
  /**
   * Whether a run of this job that this attempt's first record closes published
   * (lib/rebuilds/published-by-run.ts): asked for one RUN_BEGIN returns because it was about to
   * publish (the previous attempt, or an earlier one in flight) — once its worker is gone, or it
   * has been stuck there too long. Proven: it ends `rebuilt`; unknown: left to the sweep. Without:
   * unproven.
   */
  publishProof?: (runId: string) => Promise<PublishProof>;
  /** The rebuild name as the job gave it (shown even when it names no known rebuild). */
  rebuildName: string;
  /** When the job was created (ms); shown, never used for ordering. */
  createdAt: number;
  trigger: RunTrigger;
  workerId: string;
  host: string;
  /** The run this job retries (an operator's Retry), written with the first record. */
  retryOf?: string | null;
}

export type BeginMode =
  /** Skip as "already rebuilt" if the idempotency key exists, else begin running. */
  | { kind: "check"; idempotencyKey: string }
  | { kind: "running" }
  /** The attempt ends where it begins (it failed before it could start, or waits for another version). */
  | { kind: "final"; status: FinalRunStatus; reason: string };

export interface BeginOptions {
  mode: BeginMode;
  /** Fields known at the start (version, idempotency key hash …). */
  fields?: Partial<RunRecord>;
  /** The job's pending-trigger marker, dropped if it is still this job's. */
  pendingTrigger?: string;
  /**
   * The idempotency key of the version this begin builds (known at the begin, also when forced):
   * begun running, another version its lane marked rebuilt is unmarked (RUN_BEGIN).
   */
  builds?: string;
}

export type BeginResult = (
  | { status: "began" }
  | { status: "already-rebuilt"; rebuiltBy: string }
  | { status: "ended" }
  /**
   * The job has an operator's cancel request (read in the same script): the attempt was recorded
   * cancelled with `reason` (from the request), whatever the mode asked for; nothing else to do.
   */
  | { status: "cancelled"; reason: string }
  /**
   * A record with this run id exists, begun by another call (the same attempt picked up twice):
   * final, or in flight on a worker that still beats (one whose worker stopped beating is taken
   * over instead, answered as a begin). Nothing was written. `recordStatus`: what it says. A
   * resend of this call (its reply lost) answers what the call did.
   */
  | { status: "exists"; recordStatus: string }
) & {
  /** The job's cancel request as stored (lib/rebuilds/cancel-request parses it), or null. */
  cancelRequest: string | null;
  /**
   * This call's id, stored in the record it began (`beginId`): the attempt's later writes name it
   * as their owner (RunWrite.owner), so they never land on a record another call began.
   */
  beginId: string;
};

type RunEvent = Extract<StoredEvent, { type: "run" }>["run"];

/**
 * The run event's JSON up to its status: RUN_BEGIN appends the status it wrote (a lowercase word)
 * and `"}}`. `run` is the event's last member and never empty (it has `id`), so the JSON ends in
 * `}}`; a status among the fields is dropped (the script's is the one that was written).
 */
export function runEventHead(run: Omit<RunEvent, "status"> & { status?: unknown }): string {
  const { status: _ignored, ...fields } = run;
  const json = encodeEvent({ type: "run", run: fields });
  if (!json.endsWith("}}")) throw new Error(`run event JSON does not end its record last: ${json.slice(-40)}`);
  return `${json.slice(0, -2)},"status":"`;
}

/**
 * Names one script call that a resend must recognise (RUN_BEGIN's `beginId`, RUN_VERSION's
 * `versionId`, stored in the record): a resend of the call (its reply lost to a reconnect) finds
 * what it did. Random per process (a restarted worker with the same host, pid and worker id does
 * not take its predecessor's records for its own), then a counter: no system call on every
 * attempt's path.
 */
const CALL_ID_PREFIX = crypto.randomBytes(4).toString("hex");
let calls = 0;
const nextCallId = () => `${CALL_ID_PREFIX}${(++calls).toString(36)}`;

/** Why the previous attempt of a job is closed when the next one begins. */
const ABANDONED_REASON = (attempt: number) =>
  `worker died or stalled (BullMQ job lock lost); the job was redelivered as attempt ${attempt}`;
/** The reason of an already-rebuilt skip; the script appends the run id that rebuilt it. */
const ALREADY_REBUILT_PREFIX = `${ALREADY_REBUILT_REASON} already rebuilt by run `;

export async function beginAttempt(
  store: RunStore,
  attempt: AttemptIdentity,
  options: BeginOptions,
): Promise<BeginResult> {
  const { keys, retention } = store;
  const { mode } = options;
  // A cancel request turns any begin into a cancelled record (RUN_BEGIN).
  const own: RunStatus[] =
    mode.kind === "check"
      ? ["running", "skipped", "cancelled"]
      : mode.kind === "running"
        ? ["running", "cancelled"]
        : [mode.status, "cancelled"];
  // A later attempt may close the previous one (queued or running → aborted; one that was about to
  // publish is returned to be closed with the proof of its publish, as a stray); a record in
  // flight that another pickup of this attempt began is taken over from its status (queued or
  // running).
  const layout = indexLayout(
    keys,
    attempt,
    attempt.previousRunId ? [...own, "queued", "running", "aborted"] : [...own, "queued", "running"],
  );
  const fields = fieldPairs({
    jobId: attempt.jobId,
    attempt: attempt.attempt,
    rebuild: attempt.rebuildName,
    tenant: attempt.tenant,
    createdAt: attempt.createdAt,
    trigger: attempt.trigger,
    workerId: attempt.workerId,
    host: attempt.host,
    ...(attempt.retryOf ? { retryOf: attempt.retryOf } : {}),
    progress: 0,
    ...(mode.kind === "final" ? { reason: mode.reason } : {}),
    ...options.fields,
  });
  const beginId = nextCallId();
  const lane = laneKeysOf(keys, attempt, attempt.runId, options.builds);
  const reply = await runVariadicScript(
    store.client,
    RUN_BEGIN,
    [
      keys.run(attempt.runId),
      keys.runOpenAttempt(attempt.jobId),
      keys.run(attempt.previousRunId ?? attempt.runId),
      mode.kind === "check" ? keys.idempotency(mode.idempotencyKey) : lane.version,
      options.pendingTrigger ?? keys.run(attempt.runId),
      keys.cancelRequest(attempt.jobId),
      keys.events,
      keys.metricsCounters,
      keys.runLog(attempt.runId),
      keys.workerRegistry,
      lane.mark,
    ],
    layout.keys,
    [
      attempt.runId,
      attempt.jobId,
      attempt.previousRunId ?? "",
      recordTtlMs(retention),
      layout.n,
      mode.kind === "check" ? "check" : mode.kind === "running" ? "running" : mode.status,
      ALREADY_REBUILT_PREFIX,
      ABANDONED_REASON(attempt.attempt),
      options.pendingTrigger ? "1" : "",
      layout.statuses,
      timelineSpec(keys, attempt, retention),
      // The live stream (lib/events): what the dashboards show of the new record.
      runEventHead({
        id: attempt.runId,
        rebuild: attempt.rebuildName,
        tenant: attempt.tenant,
        jobId: attempt.jobId,
        attempt: attempt.attempt,
        createdAt: attempt.createdAt,
        ...options.fields,
      }),
      keys.workerHeartbeatPrefix,
      `${new Date(Date.now()).toISOString()} record taken over by worker ${attempt.workerId} (the same attempt picked up again) from worker `,
      ...fields,
      "beginId",
      beginId,
    ],
  );
  const [code, detail, stray, cancel] = reply;
  if (stray) {
    // The job's attempt in flight was not the previous one (that one never began), or it is the
    // previous one and was about to publish: closed here, rebuilt when proven to have published.
    // Only the previous attempt's proof is asked — RUN_BEGIN returned it because its worker is
    // gone, or it was stuck at the publish too long. An earlier stray's worker may be live and
    // writing its own fence record: not asked, so one that was about to publish is left to the
    // sweep, which asks once its worker is gone.
    // (A caller that cannot ask — no `publishProof` — closes the previous one aborted, "may be published".)
    const strayProof =
      stray !== attempt.previousRunId ? NOT_ASKED : attempt.publishProof ? await attempt.publishProof(stray) : UNPROVEN;
    await abandonRun(store, { ...attempt, runId: stray }, ABANDONED_REASON(attempt.attempt), strayProof);
  }
  const cancelRequest = cancel ? cancel : null;
  switch (code) {
    case RUN_REPLY.began:
      return { status: "began", cancelRequest, beginId };
    case RUN_REPLY.alreadyRebuilt:
      return { status: "already-rebuilt", rebuiltBy: detail, cancelRequest, beginId };
    case RUN_REPLY.ended:
      return { status: "ended", cancelRequest, beginId };
    case RUN_REPLY.cancelled:
      return { status: "cancelled", reason: detail, cancelRequest, beginId };
    case RUN_REPLY.exists:
      return { status: "exists", recordStatus: detail, cancelRequest, beginId };
    default:
      throw new Error(`${RUN_BEGIN.command}: unexpected reply ${JSON.stringify(reply)}`);
  }
}

export type VersionResult = (
  | { status: "began" }
  | { status: "already-rebuilt"; rebuiltBy: string }
  /** The job has an operator's cancel request: the record ended cancelled with `reason`. */
  | { status: "cancelled"; reason: string }
  /**
   * Someone else ended or removed the record meanwhile (the job's next attempt, the
   * abandoned-run sweep; "missing": trimmed or expired): nothing was written.
   */
  | { status: "closed"; recordStatus: string }
  /**
   * The record was begun by another call than `owner` (the same attempt picked up twice, or begun
   * again by another pickup after Redis lost this one's): not this attempt's; nothing was written.
   */
  | { status: "foreign"; recordStatus: string }
) & {
  /** The job's cancel request as stored, or null. */
  cancelRequest: string | null;
};

/**
 * The version of an attempt whose record began running before it was known (its inputs took
 * long to read, lib/rebuilds/run-rebuild.ts): RUN_BEGIN's check, made late, in one round trip
 * (RUN_VERSION). An operator's cancel request ends the record cancelled; the idempotency key
 * naming a run ends it skipped "already rebuilt" (`idempotencyKey` null: a forced rebuild, no
 * check); else it gains `fields`. Only a running record is written. A resend of the call (the
 * reply lost to a reconnect) answers what the first one did.
 */
export async function recordVersion(
  store: RunStore,
  run: RunRef & { attempt: number; rebuildName: string; createdAt: number },
  options: {
    fields: Partial<RunRecord>;
    /** Checked (already rebuilt → skipped); null: not checked (a forced attempt). */
    idempotencyKey: string | null;
    /** The idempotency key of the version now known: still running, another version its lane marked rebuilt is unmarked. */
    builds?: string;
    /** The `beginId` of the begin that made this attempt's record (BeginResult.beginId). */
    owner: string;
  },
): Promise<VersionResult> {
  const { keys, retention } = store;
  const layout = indexLayout(keys, run, ["running", "skipped", "cancelled"]);
  const lane = laneKeysOf(keys, run, run.runId, options.builds);
  const reply = await runVariadicScript(
    store.client,
    RUN_VERSION,
    [
      keys.run(run.runId),
      keys.runOpenAttempt(run.jobId),
      options.idempotencyKey ? keys.idempotency(options.idempotencyKey) : lane.version,
      keys.cancelRequest(run.jobId),
      keys.events,
      keys.metricsCounters,
      lane.mark,
    ],
    layout.keys,
    [
      run.runId,
      recordTtlMs(retention),
      layout.n,
      options.idempotencyKey ? "1" : "",
      ALREADY_REBUILT_PREFIX,
      layout.statuses,
      timelineSpec(keys, run, retention),
      runEventHead({
        id: run.runId,
        rebuild: run.rebuildName,
        tenant: run.tenant,
        jobId: run.jobId,
        attempt: run.attempt,
        createdAt: run.createdAt,
        ...options.fields,
      }),
      nextCallId(),
      options.owner,
      ...fieldPairs(options.fields),
    ],
  );
  const [code, detail, cancel] = reply;
  const cancelRequest = cancel ? cancel : null;
  switch (code) {
    case RUN_REPLY.began:
      return { status: "began", cancelRequest };
    case RUN_REPLY.alreadyRebuilt:
      return { status: "already-rebuilt", rebuiltBy: detail, cancelRequest };
    case RUN_REPLY.cancelled:
      return { status: "cancelled", reason: detail, cancelRequest };
    case RUN_REPLY.final:
    case RUN_REPLY.refused:
      return { status: "closed", recordStatus: detail, cancelRequest };
    case RUN_REPLY.missing:
      return { status: "closed", recordStatus: "missing", cancelRequest };
    case RUN_REPLY.notOwner:
      return { status: "foreign", recordStatus: detail, cancelRequest };
    default:
      throw new Error(`${RUN_VERSION.command}: unexpected reply ${JSON.stringify(reply)}`);
  }
}

/** A run as its writes name it. */
export type RunRef = RunPlace & RunLane & { runId: string; jobId: string };

/** `not-owner`: the record was begun by another call than the write's `owner`. */
export type WriteResult = "written" | "missing" | "final" | "refused" | "not-owner";

export interface RunWrite {
  status?: "running" | FinalRunStatus;
  fields?: Partial<RunRecord>;
  logLines?: readonly string[];
  /** `fence`, with `set`: the fence the run published with (the newest publish counts as rebuilt: RUN_WRITE). */
  /**
   * `set` marks the version rebuilt by this run (its lane's rules, with `fence`); `fence` only
   * records `fence` in the lane and drops another version's mark (a final write sent again after
   * Redis lost it: the output may serve a newer publish by then); `del` unmarks it if it names this run.
   */
  /**
   * `heldUntil` (with "set"): the publish's claim is held until then (ms, this Redis's clock), so a
   * write applied before is the lane's newest publish: the mark counts in this incarnation of the
   * Redis (scripts.ts, REBUILT_MARK_LUA).
   */
  idempotency?: { change: "set" | "fence" | "del"; key: string; ttlMs: number; fence?: number; heldUntil?: number };
  /**
   * Names the write (stored in the record): the same write asked again once it was applied (a
   * retry after an error, a command resent after a reconnect) writes nothing a second time.
   */
  writeId?: string;
  /**
   * The `beginId` of the begin that made the writer's record: a record begun by another call
   * (the same attempt picked up twice) is not written (its log neither; the idempotency change
   * is made). Absent: written whoever began it (a write on behalf of the job, e.g. its cancel).
   */
  owner?: string;
}

/**
 * An operator force-released the claim of the attempt `run` (its holder, as the claim named it):
 * its record, if still in flight, says so (`forceReleasedBy`, and a log line), so that whoever
 * closes it for a holder that never answers (paused, dead) names the release in its reason.
 */
export async function noteForceRelease(
  store: RunStore,
  run: RunRef,
  release: { actor: string; reason: string; auditId: string },
): Promise<WriteResult> {
  const note = `by ${release.actor}: “${release.reason}”; audit entry ${release.auditId}`;
  return writeRun(store, run, {
    fields: { forceReleasedBy: note },
    logLines: [`${new Date(Date.now()).toISOString()} claim force-released ${note}`],
  });
}

/**
 * Repair made `current` the build of `runId` (the claims Redis's pointer names it) though its
 * record ended otherwise — failed, its fence record refused by a full disk: the record says so
 * (`madeCurrentLater`, a log line, its live event), and its version counts as rebuilt by it (the
 * idempotency key, for `idempotencyTtlMs`, unless another run holds it). A record that is rebuilt,
 * in flight, gone or noted already is left alone. True when noted.
 */
export async function noteMadeCurrent(
  store: Pick<RunStore, "client" | "keys"> & { client: Pick<Redis, "hget"> },
  runId: string,
  /** `lane`: the output's claim name, whose lane its version is marked in. */
  made: { fence: number; buildHash: string; idempotencyTtlMs: number; lane: string },
): Promise<boolean> {
  const { client, keys } = store;
  const key = await client.hget(keys.run(runId), "idempotencyKey");
  const reply = await runScript(
    client,
    RUN_NOTE_MADE_CURRENT,
    [
      keys.run(runId),
      keys.runLog(runId),
      keys.events,
      key ? keys.idempotency(key) : keys.run(runId),
      key ? keys.rebuiltNow(made.lane) : keys.run(runId),
    ],
    [
      `${made.fence} ${made.buildHash}`,
      `${new Date(Date.now()).toISOString()} its build ${made.buildHash} (fence ${made.fence}) was made current by repair: its publish was in the claims Redis, and the output's disk took its fence record later`,
      runId,
      key ? made.idempotencyTtlMs : "",
    ],
  );
  return reply === RUN_REPLY.written;
}

/**
 * The lane keys of a build whose version is known (`builds`: its idempotency key): that key and
 * the lane's mark HASH (RUN_BEGIN, RUN_VERSION: laneBegins); the run's own key in their place
 * (the scripts' "none") without one.
 */
function laneKeysOf(
  keys: RedisKeys,
  place: RunLane,
  runId: string,
  builds: string | undefined,
): { version: string; mark: string } {
  return {
    version: builds ? keys.idempotency(builds) : keys.run(runId),
    mark: builds && place.lane ? keys.rebuiltNow(place.lane) : keys.run(runId),
  };
}

/** RUN_WRITE's ARGV[5]: the change, `set-held:<ms>` for a set while its claim is held (a sane time only). */
function idempotencyChange(idempotency: RunWrite["idempotency"]): string {
  if (!idempotency) return "";
  const held =
    idempotency.change === "set" && idempotency.heldUntil !== undefined && heldUntilArg(idempotency.heldUntil);
  return held ? `set-held:${held}` : idempotency.change;
}

/** One write of an attempt's record (status move, fields, log lines, idempotency key). */
export async function writeRun(store: RunStore, run: RunRef, write: RunWrite): Promise<WriteResult> {
  return (await writeRunReading(store, run, write)).result;
}

/** `writeRun`, also answering the job's cancel request (read by the same script), or null. */
export async function writeRunReading(
  store: RunStore,
  run: RunRef,
  write: RunWrite,
): Promise<{ result: WriteResult; cancelRequest: string | null }> {
  const { keys, retention } = store;
  // A status move touches the run's indexes; a write of fields and lines touches none.
  const layout = write.status
    ? indexLayout(keys, run, ["queued", "running", write.status])
    : { n: 0, statuses: "", keys: [] };
  const lines = write.logLines ?? [];
  // The live stream (lib/events): what changed, for dashboards to update without a re-read;
  // written by the script with the record.
  // Not for a write of log lines alone (the recorder sends `fields: {}` with them): `run.log` says so.
  const recordEvent =
    write.status || (write.fields && Object.keys(write.fields).length > 0)
      ? encodeEvent({
          type: "run",
          run: {
            id: run.runId,
            rebuild: run.rebuild ?? "",
            tenant: run.tenant,
            ...write.fields,
            ...(write.status ? { status: write.status } : {}),
          },
        })
      : "";
  const reply = await runVariadicScript(
    store.client,
    RUN_WRITE,
    [
      keys.run(run.runId),
      keys.runLog(run.runId),
      keys.runOpenAttempt(run.jobId),
      write.idempotency ? keys.idempotency(write.idempotency.key) : keys.run(run.runId),
      keys.events,
      keys.metricsCounters,
      keys.cancelRequest(run.jobId),
      (write.idempotency?.change === "set" || write.idempotency?.change === "fence") && run.lane
        ? keys.rebuiltNow(run.lane)
        : keys.run(run.runId),
    ],
    layout.keys,
    [
      run.runId,
      recordTtlMs(retention),
      layout.n,
      write.status ?? "",
      idempotencyChange(write.idempotency),
      write.idempotency?.ttlMs ?? 0,
      write.idempotency?.change === "set" || write.idempotency?.change === "fence"
        ? (write.idempotency.fence ?? "")
        : "",
      lines.length,
      layout.statuses,
      write.status ? timelineSpec(keys, run, retention) : "",
      recordEvent,
      lines.length > 0 ? encodeEvent({ type: "run.log", id: run.runId }) : "",
      write.owner ?? "",
      ...lines,
      ...fieldPairs(write.fields ?? {}),
      ...(write.writeId ? ["writeId", write.writeId] : []),
    ],
  );
  const [code, cancel] = reply;
  const result = WRITE_RESULTS.get(code);
  if (!result) throw new Error(`${RUN_WRITE.command}: unexpected reply ${JSON.stringify(reply)}`);
  return { result, cancelRequest: cancel ? cancel : null };
}

const WRITE_RESULTS = new Map<number, WriteResult>([
  [RUN_REPLY.written, "written"],
  [RUN_REPLY.missing, "missing"],
  [RUN_REPLY.final, "final"],
  [RUN_REPLY.refused, "refused"],
  [RUN_REPLY.notOwner, "not-owner"],
]);

/**
 * The final writes this process sent lately, by run id, without their log lines (kept small): a
 * main Redis that loses an acknowledged write (a failover to a replica that had not received it,
 * a crash with `appendfsync everysec`) brings the record back `running`, and this worker's own
 * sweep would close it `aborted` ("may be published") though the attempt ended — `rebuilt`, say.
 * The sweep sends the same write again instead (`resendFinalWrite`; its `writeId` makes a repeat
 * of an applied write a no-op). Kept SENT_FINALS_KEPT_MS, at most SENT_FINALS_MAX.
 */
const sentFinals = new Map<
  string,
  {
    store: RunStore;
    run: RunRef;
    write: RunWrite;
    at: number;
    /** When it was first sent, on this process's estimate of the Redis clock (`Date.now`). */
    sentAt: number;
    answered: WriteResult | null;
  }
>();
const SENT_FINALS_KEPT_MS = 15 * 60_000;
const SENT_FINALS_MAX = 1_000;

/**
 * Keeps `write` as the run's final write while it is sent; returns what to do with the answer: a
 * write the record refused (another pickup's, final already, gone) is not what the record holds,
 * so the earlier kept write, if any, stands again. A failed send stays kept (it may have landed).
 */
function rememberFinal(store: RunStore, run: RunRef, write: RunWrite): (result: WriteResult) => void {
  const earlier = sentFinals.get(run.runId);
  sentFinals.delete(run.runId); // re-inserted last: the map's order is the sending order
  const kept = {
    store,
    run,
    write: { ...write, logLines: [] },
    at: performance.now(),
    sentAt: Date.now(),
    answered: null as WriteResult | null,
  };
  sentFinals.set(run.runId, kept);
  for (const [runId, sent] of sentFinals) {
    if (sentFinals.size <= SENT_FINALS_MAX && performance.now() - sent.at <= SENT_FINALS_KEPT_MS) break;
    sentFinals.delete(runId);
  }
  return (result) => {
    kept.answered = result;
    if (result === "written" || sentFinals.get(run.runId) !== kept) return;
    if (earlier) sentFinals.set(run.runId, earlier);
    else sentFinals.delete(run.runId);
  };
}

/**
 * Sends again the final write this process sent lately for `runId` (without its log lines):
 * what the script said, or null when none is kept (never sent here, or too long ago). A version
 * the write marked rebuilt is not marked again, only its fence recorded in the lane: the output
 * may serve a newer publish by now whose record the same loss took (black-box helper-116: a
 * request for the older version was then skipped).
 */
export async function resendFinalWrite(runId: string): Promise<WriteResult | null> {
  const sent = sentFinals.get(runId);
  if (!sent || performance.now() - sent.at > SENT_FINALS_KEPT_MS) return null;
  const { idempotency } = sent.write;
  // It ended when it was first sent (black-box helper-121: a 15 s run recorded as 52 s).
  const ended = sent.write.status && isFinalStatus(sent.write.status) ? { finishedAt: sent.sentAt } : {};
  const write: RunWrite = {
    ...sent.write,
    fields: { ...sent.write.fields, ...ended },
    ...(idempotency?.change === "set" ? { idempotency: { ...idempotency, change: "fence" as const } } : {}),
  };
  const result = await writeRun(sent.store, sent.run, write);
  sent.answered = result;
  return result;
}

/**
 * A stopping worker's last try at the final writes Redis never answered (refused: a failover's
 * NOREPLICAS, a connection lost): sent again until each is answered or `withinMs` has passed. Its
 * sweep would have sent them again later; a process that exits takes them along, and the next
 * attempt would close the record `aborted` ("may be published") though it ended — `rebuilt`, say.
 * Returns the run ids written now.
 */
export async function flushUnansweredFinals(withinMs: number): Promise<string[]> {
  const deadline = performance.now() + withinMs;
  const written: string[] = [];
  for (;;) {
    const pending = [...sentFinals.entries()].filter(([, sent]) => sent.answered === null);
    if (pending.length === 0 || performance.now() >= deadline) return written;
    await Promise.all(
      pending.map(async ([runId]) => {
        const result = await resendFinalWrite(runId).catch(() => null);
        if (result === "written") written.push(runId);
      }),
    );
    if (pending.some(([, sent]) => sent.answered === null)) await new Promise((r) => setTimeout(r, 250));
  }
}

/**
 * An attempt's record after it began: `update` and `log` queue changes without waiting (one
 * write in flight; changes made meanwhile are merged and sent when it lands, log lines at the
 * latest after `flushEveryMs`), `finish` sends what is queued with the final status.
 */
export class RunRecorder {
  private fields: Partial<RunRecord> | null = null;
  private lines: string[] = [];
  private inFlight: Promise<void> | null = null;
  private timer: NodeJS.Timeout | undefined;
  private timerDue = 0;
  private finishing = false;
  /**
   * Names this recorder's final write: its retry (the same write) is then not applied twice.
   * Made when the first final write is sent: an attempt skipped at its first record never needs
   * one, and `randomBytes` is a system call on every repeat delivery's path (bench:worker).
   */
  private finalWriteId: string | undefined;
  /** Whose record this is (`beginId`), once begun: writes to a record another call began are refused. */
  private owner: string | undefined;

  constructor(
    private readonly store: RunStore,
    private readonly run: RunRef,
    private readonly options: {
      onError?: (error: unknown) => void;
      /** Longest delay of a field update (default 200 ms). */
      updateEveryMs?: number;
      /** Longest delay of a log line (default 500 ms). */
      flushEveryMs?: number;
    } = {},
  ) {}

  /**
   * The begin that made this attempt's record (BeginResult.beginId), or `undefined` to write on
   * behalf of the job whoever began the record (an operator's cancel ends it).
   */
  ownedBy(beginId: string | undefined): void {
    this.owner = beginId;
  }

  /**
   * Fields to write soon (steps are copied now: they change in place): within `updateEveryMs`,
   * merged with every other change made meanwhile — a short run's progress costs no write of
   * its own, it lands with the final record.
   */
  update(fields: Partial<RunRecord>): void {
    const snapshot = fields.steps ? { steps: fields.steps.map((step) => ({ ...step })) } : {};
    this.fields = { ...this.fields, ...fields, ...snapshot };
    this.sendSoon(this.options.updateEveryMs ?? 200);
  }

  log(line: string): void {
    this.lines.push(`${new Date(Date.now()).toISOString()} ${line}`);
    if (this.lines.length > RUN_LOG_LINES) this.lines = keepNewestLines(this.lines);
    this.sendSoon(this.options.flushEveryMs ?? 500);
  }

  /**
   * The final record, with the last fields and log lines and the idempotency change, after the
   * write in flight landed. Resolves with what the script said (`final` when another writer —
   * the next attempt, the abandoned-run sweep — closed this record first).
   */
  async finish(
    status: FinalRunStatus,
    fields: Partial<RunRecord>,
    idempotency?: RunWrite["idempotency"],
  ): Promise<WriteResult> {
    this.finishing = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    while (this.inFlight) await this.inFlight;
    const write: RunWrite = {
      status,
      fields: { ...this.fields, ...fields },
      logLines: this.lines,
      ...(idempotency ? { idempotency } : {}),
      writeId: (this.finalWriteId ??= crypto.randomUUID().replaceAll("-", "").slice(0, 12)),
      ...(this.owner ? { owner: this.owner } : {}),
    };
    this.fields = null;
    this.lines = [];
    const answered = rememberFinal(this.store, this.run, write);
    return writeRun(this.store, this.run, write).then(
      (result) => {
        answered(result);
        return result;
      },
      (error: unknown) => {
        // Kept for a second try of the final record (its fields and lines would be lost otherwise).
        this.fields = { ...write.fields, ...this.fields };
        this.lines = [...(write.logLines ?? []), ...this.lines];
        throw error;
      },
    );
  }

  /** Sends within `delayMs`: an earlier timer stands, a later one is brought forward. */
  private sendSoon(delayMs: number): void {
    if (this.finishing || this.inFlight) return;
    const due = performance.now() + delayMs;
    if (this.timer && this.timerDue <= due) return;
    if (this.timer) clearTimeout(this.timer);
    this.timerDue = due;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      if (!this.inFlight && !this.finishing) void this.send().catch(() => {});
    }, delayMs);
  }

  /**
   * Sends what is queued now (after the write in flight) and answers what the record said, with
   * the job's cancel request (read in the same script): the owner and cancel check before a publish (`written`: the record is still this attempt's; `not-owner` or
   * `final`: another pickup took it over, or someone closed it). Fails when Redis does (what it
   * carried is lost, as for any intermediate write).
   */
  async sync(): Promise<{ result: WriteResult; cancelRequest: string | null }> {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    while (this.inFlight) await this.inFlight;
    return this.send();
  }

  private send(): Promise<{ result: WriteResult; cancelRequest: string | null }> {
    const write: RunWrite = {
      fields: this.fields ?? {},
      logLines: this.lines,
      ...(this.owner ? { owner: this.owner } : {}),
    };
    this.fields = null;
    this.lines = [];
    const written = writeRunReading(this.store, this.run, write);
    this.inFlight = written
      .then(
        () => {},
        (error: unknown) => this.options.onError?.(error),
      )
      .finally(() => {
        this.inFlight = null;
        if (this.finishing) return;
        if (this.fields) this.sendSoon(this.options.updateEveryMs ?? 200);
        else if (this.lines.length) this.sendSoon(this.options.flushEveryMs ?? 500);
      });
    return written;
  }
}

/**
 * Queues a finished record as it is (hash, indexes at its `startedAt`, retention, timeline
 * counters) into `tx`:
 * for seeding history in benchmarks and tests, never for an attempt in flight (which writes
 * through `beginAttempt` and `RunRecorder`, so its moves are checked).
 */
export function importRunInto(
  tx: ChainableCommander,
  keys: RedisKeys,
  record: RunRecord & { status: FinalRunStatus },
  retention: RunRetention,
  options: {
    /**
     * Leave it out of the timeline counters, as a record written before they existed was (tests
     * and benchmarks of the backfill, lib/runs/timeline-backfill.ts).
     */
    uncounted?: boolean;
  } = {},
): ChainableCommander {
  const place = runPlaceOf(record.rebuild, record.tenant);
  const layout = indexLayout(keys, place);
  const score = record.startedAt ?? record.createdAt;
  tx.hset(keys.run(record.id), toFields(record));
  tx.pexpire(keys.run(record.id), recordTtlMs(retention));
  const statusAt = RUN_STATUSES.indexOf(record.status);
  for (let j = 0; j < layout.n; j++) {
    tx.zadd(layout.keys[j]!, score, record.id);
    tx.zadd(layout.keys[layout.n + statusAt * layout.n + j]!, score, record.id);
  }
  if (!options.uncounted) queueTimelineCount(tx, keys, place, retention, record.id, score);
  return tx;
}
