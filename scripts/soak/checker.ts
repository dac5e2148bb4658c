/**
 * The soak's independent checker. It reads, after the soak has drained:
 *
 *   - the journals (`<journal>/<rebuild>.journal`, appended by the step processes themselves),
 *   - the soak's own event log (triggers with their job ids, kills, pauses, deploys, Redis
 *     restarts, and the publish watcher's observations of pointers and `current`),
 *   - the outputs on disk (every build and every `current`, re-hashed and compared byte for
 *     byte with what its version must contain),
 *   - and, for accounting only, Redis: run records, job states, claims, published pointers.
 *
 * Overlaps come from the journals and the event log alone. A step writer is, at any moment:
 *   controlled  its worker is up and running (it can be told to stop),
 *   paused      its worker is SIGSTOPped (or was resumed less than RESUME_GRACE_MS ago: it
 *               needs that long to notice its lost claim and stop the step),
 *   orphan      its worker is gone (SIGKILLed, or exited while the step ran on): nobody will
 *               ever stop it or clean up after it.
 * Two runs on one claim writing at the same moment are an overlap unless, throughout, one of
 * them was a paused holder — claimwatch's designed answer to that case is the fence (the stale
 * run is aborted when its worker resumes and refused at publish), so those are reported apart
 * as "fenced". Two controlled writers, an orphan writing beside anyone, or an overlap whose
 * stale writer published (the lower fence, else the earlier start: it wrote on after the other
 * held the claim, so its publish must have been refused, paused or not), count.
 */
import { isFinalStatus } from "../../lib/runs/transitions";
import { wardenSilenceFor } from "../../lib/rebuilds/steps/warden";
import { DEFAULT_WORKER_OPTIONS } from "../../worker/rebuild-worker";
import fs from "node:fs";
import path from "node:path";
import type { Queue } from "bullmq";
import type { Redis } from "ioredis";
import { claimName, listClaims, readPublished } from "../../lib/claims";
import { outputDirOf, type Definitions } from "../../lib/rebuilds/definitions";
import { BUILD_HASH, hashDirectory, readCurrent } from "../../lib/rebuilds/output";
import type { RedisKeys } from "../../lib/redis/keys";
import { readRun, runPlaceOf } from "../../lib/runs/records";
import { runSeries } from "../../lib/metrics/counters";
import type { RunRecord } from "../../lib/runs/types";
import {
  CLAIM_TTL_MS,
  KILL_GRACE_MS,
  HASHED_REBUILDS,
  SOAK_REBUILDS,
  claimLabel,
  claimRefs,
  withTimeout,
  type SoakDirs,
  type SoakEvent,
} from "./bed";
import { requestServed, type SeenPublish } from "./served";
import { contentKey, META_FILE, metaContent, NO_TENANT, partContent, partCount, partFileName } from "./content";

/** At most this long from a claim's grant to its step's first journal line (inputs read, work dir made). */
const GRANT_BEFORE_START_MS = 30_000;
/** After SIGCONT, a worker gets this long to abort a step whose claim it lost. */
export const RESUME_GRACE_MS = KILL_GRACE_MS + 1_000;
/** BullMQ job lock of the workers. */
const JOB_LOCK_MS = DEFAULT_WORKER_OPTIONS.lockDuration;
/** The step warden's silence limit for that lock, and how long after it a kill may take. */
const WARDEN_SILENCE_MS = wardenSilenceFor(JOB_LOCK_MS);
const WARDEN_MARGIN_MS = 1_000;

export interface CheckerInput {
  dirs: SoakDirs;
  main: Redis;
  claims: Redis;
  keys: RedisKeys;
  definitions: Definitions;
  queue: Queue;
}

/** A run record's reason for a publish that moved the Redis pointer only. */
const REDIS_ONLY_PUBLISH = /granted twice|fence could not be recorded on disk/;

export interface Figures {
  overlaps: number;
  lost: number;
  corrupt: number;
  /** Step processes found alive after their run ended (the soak's /proc sampler: soak/escapees.ts). */
  escaped: number;
  staleLeft: number;
  pointerWrong: number;
  /** Run records not in a final status after the drain (issue 13: every attempt ends). */
  stuckRunning: number;
  /** Runs the watcher saw publish whose record does not say rebuilt (issue 13: the history tells the truth). */
  unrecordedPublishes: number;
  /** Cells (rebuild, tenant, status) where the run counters behind /metrics differ from the final records. */
  miscounted: number;
  /** Issue 14: a fence held by two grants (two attempts of different jobs recorded with one fence on one claim). */
  reissued: number;
  /** Issue 14: the Redis pointer or `current` moved to a build of a lower fence than one already published. */
  rolledBack: number;
  /** A job that published again after another job's publish on its output (a repeat that changed the output). */
  republished: number;
  /** Issue 14: a requested version not published whose job ended because its claim was lost (not a real failure). */
  dropped: number;
  /**
   * Attempts of the hashed rebuild whose record began before their version was known and got it
   * added (RUN_VERSION left `versionId` on it): 0 with hashed triggers means the soak never took
   * that path, and fails.
   */
  earlyBegins: number;
  /** Hashed records that ended while their inputs were read (no version): a fault landed in the read. */
  readsCut: number;
  /** Triggers sent without a version (the hashed rebuild's). */
  hashedTriggers: number;
  maxResumeS: number | null;
  triggers: number;
  kills: number;
  pauses: number;
  /** Publishes whose fence record the disk refused (fence-disk): in Redis only, their attempts failed as transient. */
  refusedRecords: number;
  /**
   * What runs left in the outputs that only a SIGKILLed worker may leave: work dirs, holding
   * marks, temporary files of `current` and the fence record (the space a full disk needs back).
   */
  leftBehind: number;
  /** Worker stops that did not end within the soak's grace and were SIGKILLed (must be 0). */
  hungStops: number;
}

export interface CheckReport {
  lines: string[];
  figures: Figures;
}

export interface JournalRun {
  runId: string;
  /** The claim's fence the step ran under (its environment), when it had one. */
  fence: number | null;
  rebuild: string;
  tenant: string | null;
  version: string;
  pid: number;
  workerPid: number;
  start: number;
  stop: number;
  stopKind: string;
  writes: number;
  /** Writes after the worker that spawned it was gone. */
  orphanWrites: number;
  /** Times of the completed writes, and whether the step's parent had changed by then. */
  writeTimes: { t: number; reparented: boolean }[];
  lines: string[];
}

export interface WorkerTimeline {
  pid: number;
  workerId: string | null;
  goneAt: number | null;
  goneHow: string | null;
  pauses: { from: number; to: number; ms: number }[];
}

type WriterState = "controlled" | "paused" | "orphan";

interface Overlap {
  claim: string;
  a: JournalRun;
  b: JournalRun;
  from: number;
  to: number;
  kind: "live" | "orphan" | "fenced";
  bothPublished: boolean;
  /**
   * The stale writer (the lower fence; else the earlier start) published: it wrote on after the
   * other held the claim, so its claim was lost by then and its publish must have been refused,
   * whoever was paused.
   */
  stalePublished: boolean;
}

export async function runChecker(input: CheckerInput): Promise<CheckReport> {
  const lines: string[] = [];
  const events = readEvents(path.join(input.dirs.root, "events.jsonl"));
  const t0 = events[0]?.t ?? 0;
  const at = (t: number) => `t+${((t - t0) / 1000).toFixed(2)}s`;
  const workers = workerTimelines(events);
  const records = await readAllRuns(input.main, input.keys);
  const recordById = new Map(records.map((r) => [r.id, r]));
  // A hashed rebuild's runs carry the hash of its input as their version: the version the input
  // held then (the trigger stream's `inputs` events), so versions compare as for the others.
  const versionOfInput = new Map<string, string>(); // "<rebuild> <hash>" → vNNNN
  for (const e of events)
    if (e.kind === "inputs") versionOfInput.set(`${String(e.rebuild)} ${String(e.hash)}`, String(e.version));
  const versionOf = (run: { rebuild: string; version?: string | null }): string | undefined =>
    run.version ? (versionOfInput.get(`${run.rebuild} ${run.version}`) ?? run.version) : undefined;
  const journal = readJournals(input.dirs.journal, events);
  // A step whose worker died before the step read its parent PID reports PID 1: its run record
  // names the worker that spawned it.
  const pidOfWorker = new Map([...workers.values()].map((w) => [w.workerId, w.pid]));
  for (const run of journal.values()) {
    if (!workers.has(run.workerPid)) {
      const pid = pidOfWorker.get(recordById.get(run.runId)?.workerId ?? null);
      if (pid !== undefined) run.workerPid = pid;
    }
    run.orphanWrites = run.writeTimes.filter((w) => w.reparented || isOrphanAt(run, workers, w.t)).length;
  }
  const pointerEvents = events.filter((e) => e.kind === "pointer");

  // --- what was published (records ∪ observed pointers) ------------------------------------
  const publishedRunIds = new Set(records.filter((r) => r.status === "rebuilt").map((r) => r.id));
  for (const e of pointerEvents) if (typeof e.runId === "string" && e.runId) publishedRunIds.add(e.runId);
  const publishedVersions = new Set<string>(); // "<claim> <version>"
  // claim → each publish: its version and when it was seen (the record's finish, else the pointer's event)
  const publishesOf = new Map<string, { version: string; t: number }[]>();
  // claim → each publish as the served-request rule reads it (soak/served.ts)
  const seenPublishesOf = new Map<string, SeenPublish[]>();
  const pointerSeenAt = new Map<string, number>();
  const pointerFenceOf = new Map<string, number>();
  for (const e of pointerEvents) {
    if (typeof e.runId === "string" && e.runId && !pointerSeenAt.has(e.runId)) pointerSeenAt.set(e.runId, Number(e.t));
    if (typeof e.runId === "string" && e.runId && typeof e.fence === "number") pointerFenceOf.set(e.runId, e.fence);
  }
  for (const id of publishedRunIds) {
    const run = recordById.get(id) ?? null;
    const jr = journal.get(id);
    const version = (run ? versionOf(run) : undefined) ?? (jr ? versionOf(jr) : undefined);
    if (!version) continue;
    const label = claimLabel({ rebuild: run?.rebuild ?? jr!.rebuild, tenant: run?.tenant ?? jr?.tenant });
    publishedVersions.add(`${label} ${version}`);
    const t = run?.finishedAt ?? pointerSeenAt.get(id) ?? Number.POSITIVE_INFINITY;
    publishesOf.set(label, [...(publishesOf.get(label) ?? []), { version, t }]);
    const fence = run?.fence ?? pointerFenceOf.get(id);
    // Done by the earliest sight of it: a final write can land long after the publish (review helper-118).
    const doneAt = Math.min(run?.finishedAt ?? Infinity, pointerSeenAt.get(id) ?? Infinity);
    if (typeof fence === "number")
      seenPublishesOf.set(label, [
        ...(seenPublishesOf.get(label) ?? []),
        { version, fence, doneAt, ...(run?.startedAt ? { beganAt: run.startedAt } : {}) },
      ]);
  }

  /**
   * "<claim> <version>" of a hashed rebuild for which a newer version was published after `since`
   * (its input moved on, and a later read of it was built): a publish before the request, or of
   * a rebuild whose versions are named by the caller, covers nothing.
   */
  const coveredByNewer = (key: string, since: number): boolean => {
    const [label = "", version = ""] = key.split(" ");
    if (!HASHED_REBUILDS.has(label.split("/")[0]!)) return false;
    return (publishesOf.get(label) ?? []).some((p) => p.version > version && p.t >= since);
  };

  // --- triggers ----------------------------------------------------------------------------
  const triggers = events.filter((e) => e.kind === "trigger");
  const triggerModes = countBy(triggers, (e) => String(e.mode));
  const deduplicated = triggers.filter((e) => e.status === "deduplicated").length;
  const notAccepted = events.filter((e) => e.kind === "trigger-error" || e.kind === "trigger-refused").length;
  const unreplicated = events.filter((e) => e.kind === "trigger-unreplicated").length;
  const resends = events.filter((e) => e.kind === "trigger-resent").length;
  const acceptedOnResend = triggers.filter((e) => e.resend).length;
  lines.push(
    `triggers: ${triggers.length} accepted (${formatCounts(triggerModes, ["new", "again", "mid-run", "redeliver", "force", "back"])}; ` +
      `${deduplicated} collapsed into a waiting job)${notAccepted ? `; ${notAccepted} not accepted (Redis down), not counted` : ""}` +
      (unreplicated
        ? `; ${unreplicated} answered not-replicated (fewer replicas than asked had the job), not counted`
        : "") +
      (resends
        ? `; ${resends} sent again with their request id (not replicated, or no answer), ${acceptedOnResend} accepted then`
        : ""),
  );

  // --- runs --------------------------------------------------------------------------------
  const byStatus = countBy(records, (r) => r.status);
  const skipReasons = countBy(
    records.filter((r) => r.status === "skipped"),
    (r) => (r.reason ?? "").split(":")[0] || "?",
  );
  const deferred = countDeferred(input.dirs.logs);
  lines.push(
    `rebuilds run: ${journal.size} step runs started (journal); run records: ${records.length} — rebuilt ${byStatus.get("rebuilt") ?? 0}, ` +
      `skipped ${byStatus.get("skipped") ?? 0} (${formatCounts(skipReasons)}), superseded ${byStatus.get("superseded") ?? 0}, ` +
      `aborted ${byStatus.get("aborted") ?? 0}, failed ${byStatus.get("failed") ?? 0}, still running ${byStatus.get("running") ?? 0}`,
  );
  lines.push(
    `skips: ${byStatus.get("skipped") ?? 0}; deferred: ${deferred} (worker logs); superseded: ${byStatus.get("superseded") ?? 0}`,
  );
  const hashedTriggers = triggers.filter((t) => t.hashed).length;
  const hashedRecords = records.filter((r) => HASHED_REBUILDS.has(r.rebuild));
  const versioned = await Promise.all(hashedRecords.map((r) => input.main.hexists(input.keys.run(r.id), "versionId")));
  const earlyBegins = versioned.filter((v) => v === 1).length;
  // Records that began while their inputs were read and ended before a version was known: a
  // kill, pause, shutdown or cancel landed inside the read (or the read failed).
  const readsCut = hashedRecords.filter((r) => !r.version && isFinalStatus(r.status)).length;
  lines.push(
    `hashed inputs (${[...HASHED_REBUILDS].join(", ") || "none"}): ${hashedTriggers} trigger(s) sent without a version; ` +
      `${earlyBegins} of ${hashedRecords.length} records began running before their version was read and got it after; ` +
      `${readsCut} ended while their inputs were read`,
  );

  // --- chaos -------------------------------------------------------------------------------
  const kills = events.filter((e) => e.kind === "kill");
  const pauses = events.filter((e) => e.kind === "pause");
  const deploys = events.filter((e) => e.kind === "deploy");
  const redisStops = events.filter((e) => e.kind === "redis-stop");
  const redisDowntimes = redisStops.map((stop) => {
    const up = events.slice(events.indexOf(stop)).find((e) => e.kind === "redis-up");
    return up ? (up.t - stop.t) / 1000 : NaN;
  });
  const failovers = events.filter((e) => e.kind === "redis-failover");
  const freezes = events.filter((e) => e.kind === "redis-freeze");
  // A worker stop that outlived the soak's grace and was SIGKILLed: a stop must end on its own.
  const hungStops = events.filter((e) => e.kind === "worker-stop-timeout");
  const fenceDisks = events.filter((e) => e.kind === "fence-disk");
  const fullDisks = events.filter((e) => e.kind === "disk-full");
  const refusedRecords = records.filter((r) => /fence could not be recorded on disk/.test(r.reason ?? ""));
  const pauseMs = pauses.map((p) => Number(p.ms));
  lines.push(
    `kills: ${kills.length} (${kills.filter((k) => asJobs(k).length > 0).length} while running a job, ` +
      `${kills.filter((k) => k.reading === true).length} while reading a hashed rebuild's inputs); ` +
      `pauses: ${pauses.length} (${pauseMs.filter((ms) => ms > CLAIM_TTL_MS).length} longer than the ${CLAIM_TTL_MS / 1000} s claim TTL, ` +
      `${pauseMs.filter((ms) => ms > JOB_LOCK_MS).length} longer than the ${JOB_LOCK_MS / 1000} s job lock; longest ${(Math.max(0, ...pauseMs) / 1000).toFixed(1)} s); ` +
      `deploys: ${deploys.length}; Redis restarts: ${redisStops.length} (stop→up ${redisDowntimes.map((s) => `${s.toFixed(1)} s`).join(", ") || "-"}); ` +
      (failovers.length
        ? `Sentinel failovers: ${failovers.length} (${failovers.map((e) => `${e.crash ? "primary killed" : "asked"}, ${(Number(e.ms) / 1000).toFixed(1)} s to a new primary`).join("; ")}); `
        : "") +
      `Redis freezes: ${freezes.length} (${freezes.map((e) => `${(Number(e.ms) / 1000).toFixed(1)} s`).join(", ") || "-"}; ` +
      `${deploys.filter((d) => typeof d.during === "string" && d.during.startsWith("redis-freeze")).length} deploy(s) during one); ` +
      `stops SIGKILLed after the grace (hung): ${hungStops.length}${hungStops.length ? ` (${hungStops.map((e) => `pid ${String(e.pid)} at ${at(e.t)}`).join(", ")})` : ""}; ` +
      `disk refusing fence records: ${fenceDisks.length} window(s) (${fenceDisks.map((e) => `${at(e.t)} for ${(Number(e.ms) / 1000).toFixed(1)} s`).join(", ") || "-"}), ` +
      `${refusedRecords.length} publish(es) left in Redis only, their attempts failed as transient; ` +
      `outputs' disk full: ${fullDisks.length} window(s) (${fullDisks.map((e) => `${at(e.t)} for ${(Number(e.ms) / 1000).toFixed(1)} s`).join(", ") || "-"})`,
  );

  // --- kill → resume -----------------------------------------------------------------------
  const resumes: { s: number; jobId: string; kill: SoakEvent }[] = [];
  const unresumed: string[] = [];
  for (const kill of kills) {
    for (const job of asJobs(kill)) {
      const next = records
        .filter((r) => r.jobId === job.jobId && r.attempt > job.attempt && r.startedAt !== null)
        .sort((a, b) => a.startedAt! - b.startedAt!)[0];
      if (next) resumes.push({ s: (next.startedAt! - kill.t) / 1000, jobId: job.jobId, kill });
      else unresumed.push(`${job.jobId} (killed at ${at(kill.t)} in attempt ${job.attempt})`);
    }
  }
  const maxResumeS = resumes.length ? Math.max(...resumes.map((r) => r.s)) : null;
  const redelivered = events.filter((e) => e.kind === "redelivered").map((e) => Number(e.ms) / 1000);
  const notRedelivered = events.filter((e) => e.kind === "not-redelivered");
  lines.push(
    `kill→resume: ${resumes.length ? resumes.map((r) => `${r.s.toFixed(1)} s`).join(", ") : "no job was running on a killed worker"}` +
      (unresumed.length ? `; never resumed: ${unresumed.join(", ")}` : ""),
  );
  lines.push(
    `kill→redelivery (BullMQ hands the job to a worker again; deferrals behind other holders come after): ` +
      `${redelivered.map((s) => `${s.toFixed(1)} s`).join(", ") || "-"}` +
      (notRedelivered.length
        ? `; not redelivered: ${notRedelivered.map((e) => `${String(e.jobId)} (${String(e.state)}${e.failedReason ? `: ${String(e.failedReason)}` : ""})`).join(", ")}`
        : ""),
  );

  // --- overlaps (journal + event log only) ---------------------------------------------------
  const overlaps = findOverlaps(journal, workers, publishedRunIds, redisLossWindows(events));
  const counted = overlaps.filter((o) => o.kind !== "fenced");
  const fenced = overlaps.filter((o) => o.kind === "fenced");
  const orphans = [...journal.values()].filter((r) => r.orphanWrites > 0 || isOrphanAt(r, workers, r.stop));
  lines.push(
    `step writers whose worker died under them (orphans): ${orphans.length}, ${sum(orphans.map((r) => r.orphanWrites))} writes after the worker was gone; ` +
      `fenced overlaps (a paused holder's step wrote on beside a newer holder, never published): ${fenced.length}`,
  );
  for (const run of [...orphans].sort((a, b) => b.orphanWrites - a.orphanWrites).slice(0, 2)) {
    const w = workers.get(run.workerPid);
    lines.push(
      `    e.g. ${run.runId} (${claimLabel(run)} ${run.version}, step pid ${run.pid}): worker pid ${run.workerPid} gone at ${w?.goneAt ? at(w.goneAt) : "?"} (${w?.goneHow ?? "?"}); ` +
        `the step wrote ${at(run.start)}–${at(run.stop)}, ${run.orphanWrites} of ${run.writes} writes after that, last line "${run.stopKind}"`,
    );
  }

  // --- lost triggers -----------------------------------------------------------------------
  const runsByJob = groupBy(records, (r) => r.jobId);
  const jobStates = await jobStatesOf(input.queue, [
    ...new Set([...triggers.map((t) => String(t.jobId)), ...runsByJob.keys()]),
  ]);
  // A version counts as "recorded failed" when a job for it ended (failed, or completed as
  // superseded) and its last run record says so with a reason. A job that BullMQ failed by
  // itself (its stall limit, its start limit) counts only when a record says the queue gave it
  // up (the worker whose pickup it failed at writes one).
  const failedVersions = new Map<string, string>(); // "<claim> <version>" → reason
  const failedSince = new Map<string, number>(); // "<claim> <version>" → when its failed job's last attempt started
  // "<claim> <version>" → when the last of its failed jobs ended: a failure excuses only a request
  // sent before that (one its job could carry), not one sent after every job for it had ended.
  const failedUntil = new Map<string, number>();
  for (const [jobId, runs] of runsByJob) {
    const last = [...runs].sort((a, b) => b.attempt - a.attempt)[0]!;
    const job = jobStates.get(jobId);
    if (!job || !["failed", "completed"].includes(job.state)) continue;
    if (job.state === "failed" && BULLMQ_OWN_FAILURE.test(job.failedReason ?? "") && !gaveUpRecord(runs)) continue;
    if (["failed", "aborted", "superseded"].includes(last.status) && last.reason) {
      const key = `${claimLabel(last)} ${versionOf(last)}`;
      failedVersions.set(key, `${last.status}: ${last.reason}`);
      failedSince.set(key, Math.min(failedSince.get(key) ?? Infinity, last.startedAt ?? last.createdAt));
      failedUntil.set(key, Math.max(failedUntil.get(key) ?? -Infinity, last.finishedAt ?? Infinity));
    }
  }
  const bullmqFailures = [...jobStates.entries()].filter(
    ([jobId, job]) =>
      job.state === "failed" &&
      BULLMQ_OWN_FAILURE.test(job.failedReason ?? "") &&
      !gaveUpRecord(runsByJob.get(jobId) ?? []),
  );
  const leftRunning = records.filter((r) => !isFinalStatus(r.status));
  // Every publish the watcher saw names a run whose record says rebuilt: a holder whose record
  // was taken over or closed (paused past its heartbeat) must not publish (issue 13, the run
  // history tells what happened). A publish refused by the fence file (the claims Redis granted
  // its fence twice: "not published"), or whose fence record the disk refused (fence-disk: its
  // attempt failed as transient), moved the Redis pointer only, and says so in its record. A
  // holder killed between its publish and its final record is closed once its worker stops
  // beating: `rebuilt` when the claims Redis's pointer still names it (published-by-run.ts), else
  // `aborted`, its record naming the build it was publishing. That is accepted only for a worker
  // the soak SIGKILLed (a paused one's attempt must end its own record: RELIABILITY.md), and only
  // when the closer could not have seen the publish (abortedPublishExcused).
  const killedWorkers = new Set(events.filter((e) => e.kind === "kill").map((e) => String(e.workerId)));
  const namesItsPublish = (record: RunRecord | undefined, runId: string) =>
    record?.status === "aborted" &&
    killedWorkers.has(record.workerId ?? "") &&
    abortedPublishExcused(events, {
      claim: claimLabel(record),
      runId,
      closedAt: record.closedAt ?? record.finishedAt ?? Infinity,
    }) &&
    pointerEvents.some(
      (e) =>
        e.runId === runId &&
        typeof e.value === "string" &&
        (record.reason ?? "").includes(
          `its worker had stopped beating after it passed its check before publishing build ${e.value} `,
        ),
    );
  // A later attempt of the same job that found the publish listed (the publish script lists its
  // run) and skipped says so: "already-rebuilt: run <id> of this job published its build here
  // before". Its record tells the publish, whatever the earlier record could not prove.
  const laterRecordNamesIt = (runId: string) =>
    records.some(
      (r) =>
        r.status === "skipped" &&
        (r.reason ?? "").startsWith(`already-rebuilt: run ${runId} of this job published its build here before`),
    );
  const unrecordedPublishes = [
    ...new Set(pointerEvents.map((e) => (typeof e.runId === "string" ? e.runId : "")).filter(Boolean)),
  ]
    .map((runId) => ({ runId, record: recordById.get(runId) }))
    .filter(
      ({ runId, record }) =>
        record?.status !== "rebuilt" &&
        !REDIS_ONLY_PUBLISH.test(record?.reason ?? "") &&
        // Repair made its build current later, and its record says so (RUN_NOTE_MADE_CURRENT).
        !record?.madeCurrentLater &&
        !namesItsPublish(record, runId) &&
        !laterRecordNamesIt(runId),
    );
  // Every attempt that reached a final status is counted once in the run counters behind
  // /metrics, by the script that made it final (lib/metrics/counters): the counters must match
  // the records, cell by cell, both ways (a Redis crash loses a record and its count together).
  // The soak trims no run records (retention.runs is far above its runs); a run that trimmed
  // records would leave the counters (which only go up) above them.
  const runCounters = await input.main.hgetall(input.keys.metricsCounters);
  const expectedCounts = new Map<string, number>();
  for (const r of records) {
    const place = runPlaceOf(r.rebuild, r.tenant);
    if (!isFinalStatus(r.status) || !place.rebuild) continue; // no valid rebuild: counted in no series
    const cell = `runs|${runSeries(place.rebuild, place.tenant)}|${r.status}`;
    expectedCounts.set(cell, (expectedCounts.get(cell) ?? 0) + 1);
  }
  const miscounted: string[] = [];
  for (const cell of new Set([
    ...expectedCounts.keys(),
    ...Object.keys(runCounters).filter((f) => f.startsWith("runs|")),
  ])) {
    const inRecords = expectedCounts.get(cell) ?? 0;
    const count = Number(runCounters[cell] ?? 0);
    if (inRecords !== count) miscounted.push(`${cell}: counted ${count}, records ${inRecords}`);
  }
  const lost: string[] = [];
  const outcomes = new Map<string, number>();
  /**
   * What a trigger asked for, as "<claim> <version>". A hashed trigger asked for the output to be
   * built from its input as its job reads it (the newest attempt that read one), at least the
   * version the input held when it was sent (an older one, or none read, answers with why); a
   * newer version published covers it (the job's next attempt re-reads the input: a holder that
   * lost its claim builds what the input holds by then, not what a skipper saw it build).
   */
  const requestedBy = (trigger: SoakEvent, runs: RunRecord[]): { key: string; problem?: string; covered?: boolean } => {
    const label = claimLabel({ rebuild: String(trigger.rebuild), tenant: (trigger.tenant as string | null) ?? null });
    if (!trigger.hashed) {
      const key = `${label} ${versionOf({ rebuild: String(trigger.rebuild), version: String(trigger.version) })}`;
      // A hash named explicitly (mid-run) for a hashed rebuild: skipped as claim-held while a
      // versionless job built it, it is covered when that job's retry (after a kill) re-read the
      // input and built a newer one: the input no longer holds the hash's content.
      return { key, covered: coveredByNewer(key, Number(trigger.t)) };
    }
    const read = runs.map(versionOf).find((v) => v !== undefined);
    if (read === undefined) return { key: `${label} ${String(trigger.version)}`, problem: "no attempt read its input" };
    if (read < String(trigger.version))
      return {
        key: `${label} ${read}`,
        problem: `read ${read}, older than the ${String(trigger.version)} its input held at the trigger`,
      };
    return { key: `${label} ${read}`, covered: coveredByNewer(`${label} ${read}`, Number(trigger.t)) };
  };
  /** A job for that version ended failed, with a reason, after the request was sent. */
  const failedFor = (key: string, trigger: SoakEvent) =>
    failedVersions.has(key) && (failedUntil.get(key) ?? -Infinity) >= Number(trigger.sentAt ?? trigger.t);
  for (const trigger of triggers) {
    const jobId = String(trigger.jobId);
    const runs = [...(runsByJob.get(jobId) ?? [])].sort((a, b) => b.attempt - a.attempt);
    const { key, problem, covered } = requestedBy(trigger, runs);
    const job = jobStates.get(jobId);
    const state = job
      ? `${job.state}${job.failedReason ? ` "${job.failedReason}"` : ""}, ${job.attemptsStarted} starts`
      : "unknown";
    const last = runs[0];
    const outcome = last
      ? last.status === "skipped"
        ? `skipped ${(last.reason ?? "").split(":")[0]}`
        : last.status
      : "no run";
    outcomes.set(outcome, (outcomes.get(outcome) ?? 0) + 1);
    // A version named by the caller must be published after the request, or be what the output
    // served (nothing else under way) when the job ended without publishing: the stream asks for
    // older versions again (`back`), so a publish before the request proves nothing.
    const [label = "", version = ""] = key.split(" ");
    const served = HASHED_REBUILDS.has(String(trigger.rebuild))
      ? undefined
      : requestServed({
          publishes: seenPublishesOf.get(label) ?? [],
          version,
          // First sent: a resend answered with the same job counts from the first (review helper-118).
          requestedAt: Number(trigger.sentAt ?? trigger.t),
          ...(last && last.status !== "rebuilt" && last.finishedAt
            ? { ended: { from: last.startedAt ?? last.createdAt, at: last.finishedAt } }
            : {}),
        });
    const published = served ? served.served : publishedVersions.has(key);
    if (!problem && (covered || published || failedFor(key, trigger))) continue;
    const unserved = served && !served.served ? served.why : undefined;
    lost.push(
      `${key}${problem ? ` (${problem})` : ""}${unserved ? ` (${unserved})` : ""} (${String(trigger.mode)}${trigger.hashed ? ", no version sent" : ""} at ${at(trigger.t)}, job ${jobId}, job state ${state}, ` +
        `runs: ${runs.map((r) => `a${r.attempt} ${r.status}${r.reason ? ` "${r.reason}"` : ""}`).join("; ") || "none"})`,
    );
  }
  const failedRecorded = triggers.filter((t) => {
    const runs = [...(runsByJob.get(String(t.jobId)) ?? [])].sort((a, b) => b.attempt - a.attempt);
    const { key, covered } = requestedBy(t, runs);
    return !covered && !publishedVersions.has(key) && failedFor(key, t);
  }).length;
  lines.push(
    `trigger outcomes (the job's last attempt): ${formatCounts(outcomes)}; versions not published but recorded failed with a reason: ${failedRecorded} trigger(s)`,
  );
  const failedRuns = records.filter((r) => r.status === "failed");
  for (const [reason, count] of countBy(failedRuns, (r) => r.reason ?? "?")) {
    lines.push(`    failed ×${count}: "${reason}"`);
  }
  lines.push(
    `jobs failed by BullMQ itself, with no run record saying so: ${bullmqFailures.length}` +
      (bullmqFailures.length
        ? ` (${formatCounts(countBy(bullmqFailures, ([, job]) => job.failedReason ?? "?"))})`
        : "") +
      `; run records not in a final status after the drain: ${leftRunning.length}` +
      `; run counters that differ from the final records: ${miscounted.length}`,
  );
  for (const m of miscounted.slice(0, 8)) lines.push(`    miscounted ${m}`);

  // --- builds and current: content hash and content -------------------------------------------
  const corrupt: string[] = [];
  const buildMeta = new Map<string, { tenant: string; version: string }>(); // "<rebuild> <hash>"
  let buildsChecked = 0;
  let workDirsLeft = 0;
  const leftBehind: string[] = [];
  // What a SIGKILLed worker may leave: the work dirs of the runs it ran, its holding marks (they
  // name its pid), a temporary file it was writing when it died (mtime just before a kill).
  const killedRunIds = new Set(kills.flatMap((e) => asJobs(e).map((job) => job.runId)));
  const killedPids = new Set(kills.map((e) => Number(e.pid)));
  const killedWorkerIds = new Set(kills.map((e) => String(e.workerId)));
  const killedJustAfter = (mtimeMs: number) => kills.some((e) => e.t >= mtimeMs - 50 && e.t - mtimeMs <= 2_000);
  for (const spec of SOAK_REBUILDS) {
    const definition = input.definitions.rebuilds.get(spec.name)!;
    // Each tenant builds into its own directory (outputDirOf): check every one.
    for (const tenant of spec.tenants ?? [undefined]) {
      const output = outputDirOf(definition, tenant);
      const label = tenant ? `${spec.name}/${tenant}` : spec.name;
      const buildsDir = path.join(output, "builds");
      // Granted-fence and holding marks (published-fence.ts, holding-marks.ts) are not builds.
      const names = (fs.existsSync(buildsDir) ? fs.readdirSync(buildsDir) : []).filter(
        (name) => !name.startsWith(".granted-fence@") && !name.startsWith(".holding-fence@"),
      );
      for (const name of names) {
        buildsChecked += 1;
        const problem = await verifyBuild(path.join(buildsDir, name), name, spec);
        if (problem.error) corrupt.push(`${label}/builds/${name}: ${problem.error}`);
        else buildMeta.set(`${spec.name} ${name}`, problem.meta!);
      }
      const workRoot = path.join(output, ".work");
      const workDirs = fs.existsSync(workRoot) ? fs.readdirSync(workRoot) : [];
      workDirsLeft += workDirs.length;
      for (const name of workDirs) {
        const runId = /^(.+)-f\d+-[0-9a-f]{6}$/.exec(name)?.[1];
        // Also a run it picked up between the soak's look at what it ran and the kill.
        const byKilled = runId !== undefined && killedWorkerIds.has(recordById.get(runId)?.workerId ?? "");
        if (!runId || !(killedRunIds.has(runId) || byKilled)) leftBehind.push(`${label}/.work/${name}`);
      }
      for (const name of fs.existsSync(buildsDir) ? fs.readdirSync(buildsDir) : []) {
        if (!name.startsWith(".holding-fence@")) continue;
        const pid = Number((readJsonOrNull(path.join(buildsDir, name)) as { pid?: unknown } | null)?.pid);
        if (!killedPids.has(pid)) leftBehind.push(`${label}/builds/${name} (pid ${pid || "?"})`);
      }
      for (const name of fs.existsSync(output) ? fs.readdirSync(output) : []) {
        if (!/^\.(current-|published-fence-writing\.|claimwatch-claim-writing\.)/.test(name)) continue;
        const mtime = fs.lstatSync(path.join(output, name), { throwIfNoEntry: false })?.mtimeMs;
        if (mtime === undefined || !killedJustAfter(mtime)) leftBehind.push(`${label}/${name}`);
      }
      const current = path.join(output, "current");
      if (fs.existsSync(current) || isSymlink(current)) {
        const target = readLinkOrNull(current);
        const hash = await readCurrent(output);
        if (!hash || !fs.existsSync(current)) corrupt.push(`${label}/current -> ${target ?? "?"}: not a build`);
        else {
          const actual = await hashDirectory(current);
          if (actual !== hash) corrupt.push(`${label}/current -> ${target}: content hash ${actual}`);
        }
      }
    }
  }
  // With a small `retention.builds` (--retention-builds) a build published long ago may have
  // been pruned: that is allowed for any build that is neither `current` nor the Redis pointer
  // (both are checked, above and below); a build that exists must still be whole.
  const retentionBuilds = input.definitions.retention.builds;
  const pruning = retentionBuilds < 1_000;
  let prunedPublished = 0;
  for (const run of records.filter((r) => r.status === "rebuilt")) {
    const meta = run.buildHash ? buildMeta.get(`${run.rebuild} ${run.buildHash}`) : undefined;
    const onDisk =
      run.buildHash !== null &&
      fs.existsSync(
        path.join(
          outputDirOf(input.definitions.rebuilds.get(run.rebuild)!, run.tenant ?? undefined),
          "builds",
          run.buildHash,
        ),
      );
    if (!meta && pruning && run.buildHash && !onDisk) prunedPublished += 1;
    else if (!meta) corrupt.push(`run ${run.id} published ${run.buildHash ?? "nothing"}, which is not a whole build`);
    else if (meta.version !== run.version || meta.tenant !== (run.tenant ?? NO_TENANT)) {
      corrupt.push(
        `run ${run.id} (${claimLabel(run)} ${run.version}) published a build of ${meta.tenant} ${meta.version}`,
      );
    }
  }

  // --- stale claims --------------------------------------------------------------------------
  const claimsLeft = (await withTimeout(listClaims(input.claims, input.keys), 5_000, "listClaims")).claims;

  // --- pointers ------------------------------------------------------------------------------
  // A Redis crash may forget the newest publish (AOF everysec, RDB-only): the pointer then reads
  // older until a worker puts it back from the output's durable record (repair.ts). Such a dip —
  // a crash between the two observations, and a later observation at the old fence or higher —
  // is Redis data loss that claimwatch repaired, reported apart; any other dip counts.
  // A failover (`--redis sentinel`) loses what the replica had not received, like a crash.
  // "Between" means the loss window (the crash until the old server is down) overlaps the two:
  // the watcher can read a write the crash then loses in the moment before the server dies.
  const pointerDips: string[] = [];
  const forgottenAndRestored = (claim: string, fromT: number, toT: number, top: number): boolean =>
    isRepairedCrashDip(events, { claim, fromT, toT, top });
  const pointerWrong: string[] = [];
  for (const ref of claimRefs()) {
    const label = claimLabel(ref);
    const definition = input.definitions.rebuilds.get(ref.rebuild)!;
    const published = await readPublished(input.claims, input.keys, claimName(definition.claimPath, ref.tenant));
    const rebuilt = records.filter(
      (r) => r.status === "rebuilt" && r.rebuild === ref.rebuild && (r.tenant ?? undefined) === ref.tenant,
    );
    const observed = pointerEvents.filter((e) => e.claim === label && typeof e.fence === "number");
    const fences = [...rebuilt.map((r) => r.fence ?? 0), ...observed.map((e) => Number(e.fence))];
    const newest = fences.length ? Math.max(...fences) : null;
    for (let i = 1; i < observed.length; i++) {
      if (Number(observed[i]!.fence) < Number(observed[i - 1]!.fence)) {
        const top = Number(observed[i - 1]!.fence);
        if (forgottenAndRestored(label, observed[i - 1]!.t, observed[i]!.t, top)) {
          pointerDips.push(
            `${label}: a Redis crash forgot fence ${top} (read ${observed[i]!.fence} at ${at(observed[i]!.t)}); restored`,
          );
          continue;
        }
        pointerWrong.push(
          `${label}: the published fence went back from ${observed[i - 1]!.fence} to ${observed[i]!.fence} at ${at(observed[i]!.t)}`,
        );
      }
    }
    if (newest === null) continue;
    if (!published) {
      pointerWrong.push(`${label}: nothing published in Redis, yet fence ${newest} published`);
      continue;
    }
    if (published.fence !== newest)
      pointerWrong.push(`${label}: Redis pointer at fence ${published.fence}, newest published fence is ${newest}`);
    if (!fs.existsSync(path.join(outputDirOf(definition, ref.tenant), "builds", published.value)))
      pointerWrong.push(`${label}: Redis pointer ${published.value} names a build that is not on disk (pruned?)`);
    const newestRun = rebuilt.find((r) => r.fence === newest);
    if (newestRun && newestRun.buildHash !== published.value) {
      pointerWrong.push(
        `${label}: Redis pointer ${published.value}, the fence-${newest} run ${newestRun.id} published ${newestRun.buildHash}`,
      );
    }
    const current = await readCurrent(outputDirOf(definition, ref.tenant));
    if (current !== published.value) {
      const meta = current ? buildMeta.get(`${ref.rebuild} ${current}`) : undefined;
      pointerWrong.push(
        `${label}: ${ref.rebuild}/current -> ${current ?? "(none)"}${meta ? ` (a build of ${meta.tenant} ${meta.version})` : ""}, ` +
          `but ${label}'s pointer (fence ${published.fence}) is ${published.value}`,
      );
    }
  }
  const flips = crossTenantFlips(events, buildMeta);
  // Last fence wins, not newest version: a deferred older version can publish after a newer one.
  let olderAfterNewer = 0;
  const endsOlder: string[] = [];
  for (const ref of claimRefs()) {
    const rebuilt = records
      .filter((r) => r.status === "rebuilt" && r.rebuild === ref.rebuild && (r.tenant ?? undefined) === ref.tenant)
      .sort((a, b) => (a.fence ?? 0) - (b.fence ?? 0));
    let newestVersion = "";
    for (const run of rebuilt) {
      if ((versionOf(run) ?? "") < newestVersion) olderAfterNewer += 1;
      else newestVersion = versionOf(run) ?? "";
    }
    const final = rebuilt[rebuilt.length - 1];
    if (final && (versionOf(final) ?? "") < newestVersion)
      endsOlder.push(`${claimLabel(ref)} ends at ${versionOf(final)} after ${newestVersion}`);
  }

  // A repeat is harmless: no job publishes again once another job published after it (a job the
  // queue's Redis brought back after it published, its completion lost, put the output back to
  // its older build; helper-103). From the watcher's pointers, by the job in their run ids.
  const republished: string[] = [];
  {
    // Every publish known: the watcher's pointers (it polls: a quickly overwritten one can be
    // missed) and the records that say rebuilt, by claim and fence.
    const byClaim = new Map<string, Map<number, { runId: string; t: number }>>();
    const note = (claim: string, fence: number, runId: string, t: number) => {
      const fences = byClaim.get(claim) ?? new Map<number, { runId: string; t: number }>();
      byClaim.set(claim, fences);
      if (!fences.has(fence)) fences.set(fence, { runId, t });
    };
    for (const e of pointerEvents)
      if (typeof e.runId === "string" && e.runId && typeof e.fence === "number")
        note(String(e.claim), e.fence, e.runId, Number(e.t));
    for (const r of records)
      if (r.status === "rebuilt" && typeof r.fence === "number")
        note(claimLabel(r), r.fence, r.id, r.finishedAt ?? r.startedAt ?? r.createdAt);
    const jobOf = (runId: string) => runId.replace(/-a\d+$/, "");
    for (const [claim, fences] of byClaim) {
      const ordered = [...fences.entries()].sort((x, y) => x[0] - y[0]);
      ordered.forEach(([fence, pub], i) => {
        const job = jobOf(pub.runId);
        // The job's previous publish, and whether another job published between the two.
        const j = ordered.slice(0, i).findLastIndex(([, p]) => jobOf(p.runId) === job);
        if (j < 0) return;
        const [earlierFence, earlier] = ordered[j]!;
        const between = ordered.slice(j + 1, i).find(([, p]) => jobOf(p.runId) !== job);
        if (!between) return;
        // Not done: its record says failed (the disk refused its fence record) or deferred (its
        // fence was granted twice and another build recorded with it): the job goes on.
        const status = recordById.get(earlier.runId)?.status;
        if (status === "failed" || status === "deferred") return;
        // A trigger folded into the job after that publish asked for it again.
        const askedAgain = triggers.some(
          (t) => t.status === "deduplicated" && String(t.jobId) === job && Number(t.t) > earlier.t,
        );
        if (askedAgain) return;
        republished.push(
          `${claim}: job ${job} published again with fence ${fence} at ${at(pub.t)} (it had with fence ${earlierFence}), after ${between[1].runId} (fence ${between[0]})`,
        );
      });
    }
  }

  // --- issue 14: reissued fences, rollbacks, dropped requests --------------------------------
  // Two attempts of different jobs recorded with one fence on one claim: the fence was granted
  // twice (a takeover by the same job gets a new fence, so it never counts). The rule (issue 14)
  // is about fences used for a publish: one granted again after a run published with it counts.
  // A fence granted, never published, then forgotten by a Redis crash and granted again (the
  // first holder lost its claim with it, and its publish is refused) is reported apart.
  const reissued: string[] = [];
  const regrantedUnpublished: string[] = [];
  for (const [key, runs] of groupBy(
    records.filter((r) => typeof r.fence === "number" && r.fence > 0),
    (r) => `${claimLabel(r)} fence ${r.fence}`,
  )) {
    const jobs = new Set(runs.map((r) => r.jobId));
    if (jobs.size <= 1) continue;
    const publisher = runs.find((r) => r.status === "rebuilt");
    const after = publisher
      ? runs.filter((r) => r.jobId !== publisher.jobId && (r.startedAt ?? 0) >= (publisher.finishedAt ?? Infinity))
      : [];
    const line = `${key}: runs ${runs.map((r) => `${r.id} (${r.status})`).join(", ")}`;
    if (after.length > 0) reissued.push(line);
    else regrantedUnpublished.push(line);
  }
  // The observed pointer going to a lower fence, or `current` going back: to a build published
  // only with a fence lower than one `current` had already named. A run swaps `current` only
  // after its fenced publish, but the watcher may see the swap first (it polls; Redis may be
  // down between the publish and the next poll): a swap to a build that the claim's next
  // observed pointer publishes with the newest fence is that publish, seen late (a forced
  // rebuild reproduces the hash an older fence published, so the hash alone does not name the
  // fence). `current` moving forward to a build older than the newest pointer is a lag, not a
  // rollback: a swapper held up inside its swap (past its in-lock read of the fence record,
  // before its rename) while a newer fence published goes on with its own build, then follows
  // the newer record — its swap lock keeps the newer publisher from swapping before it, so
  // `current` never goes back (current-lock.ts, helper-146). Those are listed apart (late swaps).
  const rolledBack: string[] = [];
  const lateSwaps: string[] = [];
  const wentBackAt: { claim: string; t: number }[] = [];
  const highest = new Map<string, number>(); // claim → highest fence seen published
  const fenceOfBuild = new Map<string, number>(); // "<claim> <hash>" → highest fence it was published with
  const currentNow = new Map<string, string>(); // claim → the build `current` names
  const currentTop = new Map<string, { fence: number; t: number }>(); // claim → highest fence of a build `current` named
  const publishes = events.filter((x) => x.kind === "pointer" || x.kind === "current");
  const nextPointer = (claim: string, from: number) =>
    publishes.slice(from + 1).find((x) => x.kind === "pointer" && String(x.claim) === claim);
  // A run of `claim` with a fence above `fence` recorded rebuilt, with `current` its build (no
  // "published, but …": the swap happened), ended more than two polls before `t`.
  const madeCurrentBefore = (claim: string, fence: number, t: number) =>
    records.find(
      (r) =>
        r.status === "rebuilt" &&
        r.fence !== null &&
        r.fence > fence &&
        r.finishedAt !== null &&
        r.finishedAt + 100 < t &&
        !(r.reason ?? "").includes("published, but") &&
        // Its own final write: a record another closed (the sweep, the next attempt) or repair
        // finished says a publish, not that this run swapped `current`.
        !r.closedAt &&
        !r.madeCurrentLater &&
        claimLabel({ rebuild: r.rebuild, tenant: r.tenant }) === claim,
    );
  const named = (claim: string, fence: number, t: number) => {
    if (fence > (currentTop.get(claim)?.fence ?? 0)) currentTop.set(claim, { fence, t });
  };
  for (const [index, e] of publishes.entries()) {
    const claim = String(e.claim);
    if (e.kind === "pointer") {
      if (typeof e.fence !== "number") continue;
      const top = highest.get(claim) ?? 0;
      const topAt =
        publishes.slice(0, index).findLast((x) => x.kind === "pointer" && String(x.claim) === claim && x.fence === top)
          ?.t ?? 0;
      if (e.fence < top && !forgottenAndRestored(claim, topAt, e.t, top))
        rolledBack.push(`${claim}: pointer went from fence ${top} to ${e.fence} at ${at(e.t)}`);
      highest.set(claim, Math.max(top, e.fence));
      const buildKey = `${claim} ${String(e.value)}`;
      fenceOfBuild.set(buildKey, Math.max(fenceOfBuild.get(buildKey) ?? 0, e.fence));
      // A build `current` names, published again with a higher fence (a forced rebuild's same bytes).
      if (currentNow.get(claim) === String(e.value)) named(claim, e.fence, e.t);
    } else {
      const hash = path.basename(String(e.target ?? ""));
      const fence = fenceOfBuild.get(`${claim} ${hash}`);
      const top = highest.get(claim) ?? 0;
      const next = nextPointer(claim, index);
      const seenLate = next !== undefined && String(next.value) === hash && Number(next.fence) >= top;
      const fenceNow = seenLate ? Number(next.fence) : fence;
      const before = currentTop.get(claim);
      if (fenceNow !== undefined && before && fenceNow < before.fence) {
        wentBackAt.push({ claim, t: e.t });
        rolledBack.push(
          `${claim}: current went back to ${hash} (fence ${fenceNow}) after it had named fence ${before.fence}'s build (at ${at(before.t)}) at ${at(e.t)}`,
        );
      } else if (fence !== undefined && fence < top && !seenLate) {
        // Not seen naming a newer build (it polls every 50 ms): a run that had made a newer
        // fence's build current before this (its final record, rebuilt, saying nothing else
        // became of `current`) tells a rollback the polls missed from a late swap (review helper-158).
        const newer = madeCurrentBefore(claim, fence, e.t);
        if (newer) {
          wentBackAt.push({ claim, t: e.t });
          rolledBack.push(
            `${claim}: current went back to ${hash} (fence ${fence}) at ${at(e.t)}, after run ${newer.id} had made fence ${newer.fence}'s build current (it ended at ${at(newer.finishedAt!)})`,
          );
        } else {
          lateSwaps.push(
            `${claim}: current moved on to ${hash} (fence ${fence}) after fence ${top} published, at ${at(e.t)}`,
          );
        }
      }
      currentNow.set(claim, hash);
      // A build published before counts with that fence until a pointer naming it again is seen
      // while `current` names it (above): the next pointer may be a later reproduction of its bytes.
      const fenceNamed = fence ?? (seenLate ? Number(next.fence) : undefined);
      if (fenceNamed !== undefined) named(claim, fenceNamed, e.t);
    }
  }
  // slow-swap (chaos.ts) samples `current` every 10 ms around its held-up swapper: `current`
  // naming the newer fence's build, then the swapper's older one, is a rollback the watcher's
  // 50 ms polls may have missed (or taken for a publish seen late, when a later fence reproduced
  // the older bytes).
  for (const e of events.filter((x) => x.kind === "slow-swap-end" && x.wentBack === true)) {
    // Counted once: the watcher may have seen the same one.
    if (wentBackAt.some((w) => w.claim === String(e.claim) && w.t >= Number(e.since) && w.t <= e.t)) continue;
    const newer = e.newer as { fence: number; build: string } | null;
    rolledBack.push(
      `${String(e.claim)}: current went back to ${String(e.build)} (fence ${String(e.fence)}, a swapper held up inside its swap) after naming fence ${newer?.fence ?? "?"}'s build ${newer?.build ?? "?"}, seen by slow-swap at ${at(Number(e.since))}: ${(e.currentSeen as string[]).join(" → ")}`,
    );
  }
  // A version recorded as ended only because its claim was lost (superseded, publish refused,
  // claim lost): issue 14 says such a request is deferred, so it must have been published.
  const dropped = [...failedVersions.entries()]
    .filter(
      ([key, reason]) =>
        !publishedVersions.has(key) &&
        !coveredByNewer(key, failedSince.get(key) ?? Infinity) &&
        /^superseded|claim lost|publish refused/.test(reason),
    )
    .map(([key, reason]) => `${key}: ${reason}`);

  // --- figures -------------------------------------------------------------------------------
  lines.push(
    `.work directories left behind: ${workDirsLeft}; left behind by workers that were not SIGKILLed (work dirs, holding marks, temporary files): ${leftBehind.length}; cross-tenant flips of a shared current: ${flips}`,
  );
  for (const left of leftBehind.slice(0, 8)) lines.push(`    left behind: ${left}`);
  lines.push(
    `publishes of an older version after a newer one (last fence wins, or asked for again: back): ${olderAfterNewer}` +
      (endsOlder.length ? `; ${endsOlder.join(", ")}` : ""),
  );
  lines.push(
    `publishes a Redis crash forgot, put back from the outputs' durable records (current never moved back): ${pointerDips.length}`,
  );
  for (const dip of pointerDips.slice(0, 4)) lines.push(`    ${dip}`);
  lines.push(
    `fences a Redis crash forgot before any publish, granted again (never used for two publishes): ${regrantedUnpublished.length}`,
  );
  for (const line of regrantedUnpublished.slice(0, 4)) lines.push(`    ${line}`);
  // slow-swap (chaos.ts): a swapper held inside its swap while a newer fence published.
  const slowSwaps = events.filter((e) => e.kind === "slow-swap");
  const slowSwapEnds = events.filter((e) => e.kind === "slow-swap-end");
  lines.push(
    `slow swaps (a publisher held inside its swap of current, force-released, while a newer fence published): ${slowSwaps.length}, ` +
      `${slowSwapEnds.filter((e) => e.newer).length} with a newer fence published meanwhile, ` +
      `${slowSwapEnds.filter((e) => e.wentBack === true).length} where current went back after naming the newer build; ` +
      `late swaps (current moved on to a build older than the newest pointer: a lag, not a rollback): ${lateSwaps.length}`,
  );
  for (const e of slowSwapEnds.slice(0, 4))
    lines.push(
      `    ${String(e.claim)} fence ${String(e.fence)} at ${at(Number(e.since))}: paused ${(Number(e.pausedMs) / 1000).toFixed(1)} s${e.heldLonger === true ? " (held on for a newer holder under way)" : ""}, ` +
        `newer ${e.newer ? `fence ${String((e.newer as { fence: number }).fence)}` : "none"}; current ${(e.currentSeen as string[] | undefined)?.join(" → ") ?? "?"}`,
    );
  for (const late of lateSwaps.slice(0, 4)) lines.push(`    ${late}`);
  lines.push("must be zero:");
  lines.push(
    `  overlapping writers on one output: ${counted.length} (live ${counted.filter((o) => o.kind === "live").length}, orphan ${counted.filter((o) => o.kind === "orphan").length}, both published ${overlaps.filter((o) => o.bothPublished).length}, the stale writer published ${overlaps.filter((o) => o.stalePublished && !o.bothPublished).length})`,
  );
  for (const o of counted.slice(0, 6)) lines.push(...describeOverlap(o, at, recordById, workers));
  lines.push(`  lost triggers: ${lost.length}`);
  for (const l of lost.slice(0, 8)) lines.push(`    ${l}`);
  lines.push(
    `  partial or corrupt publishes: ${corrupt.length} (${buildsChecked} builds and every current re-hashed and compared with their version's content` +
      `${pruning ? `; ${prunedPublished} older published builds pruned by retention.builds ${retentionBuilds}` : ""})`,
  );
  for (const c of corrupt.slice(0, 8)) lines.push(`    ${c}`);
  // Escaped step processes: sampled from /proc during the soak (soak/escapees.ts); their late
  // writes, if any got through, are in escaped-writes.txt (and would be corrupt builds above).
  const escaped = events.filter((e) => e.kind === "escaped");
  const escapedWrites = fs.existsSync(path.join(input.dirs.journal, "escaped-writes.txt"))
    ? fs.readFileSync(path.join(input.dirs.journal, "escaped-writes.txt"), "utf8").trim().split("\n").filter(Boolean)
    : [];
  // Writes by a step while its worker had been SIGSTOPped past its job lock: by then the job is
  // another attempt's, and the worker's step warden must have ended the step (counted as escaped).
  const stuck = [...journal.values()]
    .map((run) => {
      const pausesOf = workers.get(run.workerPid)?.pauses ?? [];
      const late = run.writeTimes.filter((w) =>
        pausesOf.some((p) => w.t >= p.from + WARDEN_SILENCE_MS + WARDEN_MARGIN_MS && w.t < p.to),
      );
      return { run, late };
    })
    .filter((s) => s.late.length > 0);
  lines.push(
    `  escaped step processes (alive after their run ended): ${escaped.length}; late writes by escapees: ${escapedWrites.length}; ` +
      `steps writing while their worker was stopped past the step warden's ${WARDEN_SILENCE_MS / 1000} s (+${WARDEN_MARGIN_MS / 1000} s): ${stuck.length}`,
  );
  for (const e of escaped.slice(0, 8))
    lines.push(`    pid ${String(e.pid)} of ${String(e.runId)}: ${String(e.why)} (${String(e.cmd)})`);
  for (const s of stuck.slice(0, 8))
    lines.push(
      `    ${s.run.runId} (pid ${s.run.pid}, worker pid ${s.run.workerPid}): ${s.late.length} write(s), the last at ${at(s.late[s.late.length - 1]!.t)}`,
    );
  lines.push(`  stale claims left: ${claimsLeft.length}`);
  for (const c of claimsLeft.slice(0, 8))
    lines.push(
      `    ${c.name} fence ${c.fence} held by ${c.holder.workerId ?? "?"} run ${c.holder.runId ?? "?"} pttl ${c.pttlMs} ms`,
    );
  lines.push(`  current or pointer not at the newest fence's build: ${pointerWrong.length}`);
  for (const p of pointerWrong.slice(0, 8)) lines.push(`    ${p}`);
  lines.push(`  fences granted twice (reissued): ${reissued.length}`);
  for (const r of reissued.slice(0, 8)) lines.push(`    ${r}`);
  lines.push(
    `  pointer moved to a lower fence, or current back to a lower fence's build (rolled back): ${rolledBack.length}`,
  );
  for (const r of rolledBack.slice(0, 8)) lines.push(`    ${r}`);
  lines.push(`  jobs that published again after another job's publish (a repeat not harmless): ${republished.length}`);
  for (const r of republished.slice(0, 8)) lines.push(`    ${r}`);
  lines.push(`  requested versions dropped after a lost claim: ${dropped.length}`);
  for (const d of dropped.slice(0, 8)) lines.push(`    ${d}`);
  lines.push(`  run records not in a final status after the drain: ${leftRunning.length}`);
  for (const r of leftRunning.slice(0, 8)) {
    lines.push(`    ${r.id} ${r.status} (worker ${r.workerId ?? "?"}, started ${r.startedAt ? at(r.startedAt) : "?"})`);
  }
  lines.push(`  publishes whose run record does not say rebuilt: ${unrecordedPublishes.length}`);
  for (const u of unrecordedPublishes.slice(0, 8)) {
    lines.push(`    ${u.runId}: ${u.record ? `${u.record.status} (${u.record.reason ?? "no reason"})` : "no record"}`);
  }
  lines.push(`  worker stops SIGKILLed after the soak's grace (hung): ${hungStops.length}`);
  if (fenced.length) {
    lines.push("fenced overlaps (harmless by design, for the record):");
    for (const o of fenced.slice(0, 3)) lines.push(...describeOverlap(o, at, recordById, workers));
  }
  lines.push(
    `max kill→resume: ${maxResumeS === null ? "n/a" : `${maxResumeS.toFixed(1)} s`} (next attempt running, per the run records); ` +
      `max kill→redelivery: ${redelivered.length ? `${Math.max(...redelivered).toFixed(1)} s` : "n/a"}`,
  );

  return {
    lines,
    figures: {
      overlaps: counted.length,
      lost: lost.length,
      corrupt: corrupt.length,
      staleLeft: claimsLeft.length,
      pointerWrong: pointerWrong.length,
      stuckRunning: leftRunning.length,
      unrecordedPublishes: unrecordedPublishes.length,
      miscounted: miscounted.length,
      reissued: reissued.length,
      rolledBack: rolledBack.length,
      republished: republished.length,
      dropped: dropped.length,
      earlyBegins,
      readsCut,
      hashedTriggers,
      maxResumeS,
      triggers: triggers.length,
      kills: kills.length,
      pauses: pauses.length,
      refusedRecords: refusedRecords.length,
      leftBehind: leftBehind.length,
      hungStops: hungStops.length,
      escaped: escaped.length + stuck.length,
    },
  };
}

// --- journal -------------------------------------------------------------------------------

function readJournals(dir: string, events: SoakEvent[]): Map<string, JournalRun> {
  const runs = new Map<string, JournalRun>();
  const soakKills = new Map<number, number>();
  for (const e of events) if (e.kind === "orphan-kill") soakKills.set(Number(e.pid), e.t);
  for (const file of fs
    .readdirSync(dir)
    .filter((f) => f.endsWith(".journal"))
    .sort()) {
    const rebuild = file.slice(0, -".journal".length);
    for (const line of fs.readFileSync(path.join(dir, file), "utf8").split("\n")) {
      if (!line) continue;
      const [t, kind, runId, pid, ppidAtStart, ppidNow, fence, tenant, version] = line.split(" ");
      if (!t || !kind || !runId || !version) continue;
      const time = Number(t);
      let run = runs.get(runId);
      if (!run) {
        run = {
          runId,
          rebuild,
          tenant: tenant === NO_TENANT ? null : (tenant ?? null),
          version,
          pid: Number(pid),
          workerPid: Number(ppidAtStart),
          fence: /^\d+$/.test(fence ?? "") ? Number(fence) : null,
          start: time,
          stop: time,
          stopKind: "vanished",
          writes: 0,
          orphanWrites: 0,
          writeTimes: [],
          lines: [],
        };
        runs.set(runId, run);
      }
      run.lines.push(line);
      run.stop = Math.max(run.stop, time);
      if (kind === "w-") {
        run.writes += 1;
        run.writeTimes.push({ t: time, reparented: ppidNow !== ppidAtStart });
      }
      if (kind === "end" || kind === "term" || kind === "enospc" || kind.startsWith("stdout-")) run.stopKind = kind;
    }
  }
  // A step that left no last line died without a trace: SIGKILLed by the soak's clean-up (then
  // that is when), or by its own crash (then its last line is the best bound).
  for (const run of runs.values()) {
    const killedAt = soakKills.get(run.pid);
    if (run.stopKind === "vanished" && killedAt !== undefined) {
      run.stop = Math.max(run.stop, killedAt);
      run.stopKind = "killed by the soak's clean-up";
    }
  }
  return runs;
}

function workerTimelines(events: SoakEvent[]): Map<number, WorkerTimeline> {
  const workers = new Map<number, WorkerTimeline>();
  const get = (pid: number) => {
    let w = workers.get(pid);
    if (!w) {
      w = { pid, workerId: null, goneAt: null, goneHow: null, pauses: [] };
      workers.set(pid, w);
    }
    return w;
  };
  for (const e of events) {
    const pid = Number(e.pid);
    if (e.kind === "worker-ready") get(pid).workerId = String(e.workerId);
    if (e.kind === "kill" && get(pid).goneAt === null) Object.assign(get(pid), { goneAt: e.t, goneHow: "SIGKILL" });
    if (e.kind === "worker-exit" && get(pid).goneAt === null) {
      Object.assign(get(pid), { goneAt: e.t, goneHow: `exit ${String(e.code ?? e.signal)}` });
    }
    if (e.kind === "pause") get(pid).pauses.push({ from: e.t, to: Infinity, ms: Number(e.ms) });
    if (e.kind === "resume") {
      const open = get(pid).pauses.find((p) => p.to === Infinity);
      if (open) open.to = e.t;
    }
  }
  return workers;
}

function isOrphanAt(run: JournalRun, workers: Map<number, WorkerTimeline>, t: number): boolean {
  const goneAt = workers.get(run.workerPid)?.goneAt;
  return goneAt !== null && goneAt !== undefined && t > goneAt;
}

function stateAt(run: JournalRun, workers: Map<number, WorkerTimeline>, t: number): WriterState {
  if (isOrphanAt(run, workers, t)) return "orphan";
  const worker = workers.get(run.workerPid);
  if (worker?.pauses.some((p) => t >= p.from && t < p.to + RESUME_GRACE_MS)) return "paused";
  return "controlled";
}

/** Exported for its unit test (test/unit/soak-overlaps.test.ts). */
export function findOverlaps(
  journal: Map<string, JournalRun>,
  workers: Map<number, WorkerTimeline>,
  published: Set<string>,
  /** When Redis could lose acknowledged writes (redisLossWindows): a lost grant may be granted again lower. */
  lossWindows: { from: number; to: number }[] = [],
): Overlap[] {
  const byClaim = groupBy([...journal.values()], (r) => claimLabel(r));
  const found: Overlap[] = [];
  for (const [claim, runs] of byClaim) {
    runs.sort((a, b) => a.start - b.start);
    for (let i = 0; i < runs.length; i++) {
      for (let j = i + 1; j < runs.length && runs[j]!.start < runs[i]!.stop; j++) {
        const a = runs[i]!;
        const b = runs[j]!;
        const from = Math.max(a.start, b.start);
        const to = Math.min(a.stop, b.stop);
        if (to <= from) continue;
        // States change only at a worker's death, pause, or resume + grace: test each piece.
        const cuts = [from, to];
        for (const run of [a, b]) {
          const w = workers.get(run.workerPid);
          if (!w) continue;
          if (w.goneAt !== null) cuts.push(w.goneAt);
          for (const p of w.pauses) cuts.push(p.from, p.to + RESUME_GRACE_MS);
        }
        const points = [...new Set(cuts.filter((c) => c >= from && c <= to))].sort((x, y) => x - y);
        let live = false;
        let orphan = false;
        for (let k = 0; k + 1 < points.length; k++) {
          const mid = (points[k]! + points[k + 1]!) / 2;
          const sa = stateAt(a, workers, mid);
          const sb = stateAt(b, workers, mid);
          if (sa === "controlled" && sb === "controlled") live = true;
          if (sa === "orphan" || sb === "orphan") orphan = true;
        }
        const bothPublished = published.has(a.runId) && published.has(b.runId);
        // The stale one: the lower fence (the later grant wins), else the one that began first
        // (a paused worker's step may write its first line after the next holder's).
        // (A Redis that lost a grant between their grants — some time before a step's first line —
        // may have granted a lower fence after a higher one: then the start order.)
        const lossBetween = lossWindows.some((w) => w.from < b.start && w.to > a.start - GRANT_BEFORE_START_MS);
        const stale = !lossBetween && a.fence !== null && b.fence !== null && b.fence < a.fence ? b : a;
        const stalePublished = published.has(stale.runId);
        const kind = live || stalePublished ? "live" : orphan ? "orphan" : "fenced";
        found.push({ claim, a, b, from, to, kind, bothPublished, stalePublished });
      }
    }
  }
  return found;
}

function describeOverlap(
  o: Overlap,
  at: (t: number) => string,
  records: Map<string, RunRecord>,
  workers: Map<number, WorkerTimeline>,
): string[] {
  const who = (run: JournalRun) => {
    const record = records.get(run.runId);
    const w = workers.get(run.workerPid);
    const pauses = w?.pauses.filter((p) => p.from < run.stop && p.to > run.start) ?? [];
    return (
      `${run.runId} (pid ${run.pid}, worker pid ${run.workerPid}${w?.goneAt ? ` gone at ${at(w.goneAt)} by ${w.goneHow}` : ""}` +
      `${pauses.length ? `, paused ${pauses.map((p) => `${at(p.from)}–${p.to === Infinity ? "end" : at(p.to)}`).join(", ")}` : ""}; ` +
      `wrote ${at(run.start)}–${at(run.stop)}, ${run.writes} writes, last line "${run.stopKind}"; ` +
      `record: ${record ? `${record.status} fence ${record.fence ?? "-"}${record.reason ? ` "${record.reason}"` : ""}` : "none"})`
    );
  };
  return [
    `    ${o.kind} overlap on ${o.claim}: ${at(o.from)}–${at(o.to)} (${((o.to - o.from) / 1000).toFixed(2)} s)${o.bothPublished ? ", both published" : o.stalePublished ? ", the stale writer published" : ""}`,
    `      ${who(o.a)}`,
    `      ${who(o.b)}`,
  ];
}

// --- builds --------------------------------------------------------------------------------

async function verifyBuild(
  dir: string,
  name: string,
  spec: (typeof SOAK_REBUILDS)[number],
): Promise<{ error?: string; meta?: { tenant: string; version: string } }> {
  if (!BUILD_HASH.test(name)) return { error: "not a build hash" };
  const actual = await hashDirectory(dir);
  if (actual !== name) return { error: `content hash is ${actual}` };
  let meta: { rebuild: string; tenant: string; version: string; parts: number };
  try {
    meta = JSON.parse(fs.readFileSync(path.join(dir, META_FILE), "utf8")) as typeof meta;
  } catch {
    return { error: `no readable ${META_FILE}: a partial build` };
  }
  const key = contentKey(spec.name, meta.tenant, meta.version);
  const parts = partCount(key, spec.minParts, spec.spanParts);
  const expected = new Map<string, string>([[META_FILE, metaContent({ ...meta, rebuild: spec.name, parts })]]);
  for (let i = 0; i < parts; i++) expected.set(partFileName(i), partContent(key, i));
  const files = fs.readdirSync(dir).sort();
  const extra = files.filter((f) => !expected.has(f));
  const missing = [...expected.keys()].filter((f) => !files.includes(f));
  if (extra.length || missing.length) {
    return {
      error: `files differ from ${meta.tenant} ${meta.version}: extra [${extra.join(", ")}], missing [${missing.join(", ")}]`,
    };
  }
  for (const [file, content] of expected) {
    if (fs.readFileSync(path.join(dir, file), "utf8") !== content)
      return { error: `${file} is not ${meta.tenant} ${meta.version}'s` };
  }
  return { meta: { tenant: meta.tenant, version: meta.version } };
}

function crossTenantFlips(events: SoakEvent[], buildMeta: Map<string, { tenant: string }>): number {
  let flips = 0;
  const last = new Map<string, string>();
  for (const e of events.filter((x) => x.kind === "current")) {
    // A `current` (one per claim) that ever showed another tenant's build is a flip.
    const rebuild = String(e.rebuild);
    const claim = String(e.claim ?? rebuild);
    const tenant = buildMeta.get(`${rebuild} ${path.basename(String(e.target))}`)?.tenant;
    if (!tenant) continue;
    const previous = last.get(claim);
    if (previous && previous !== tenant) flips += 1;
    last.set(claim, tenant);
  }
  return flips;
}

// --- Redis reads ---------------------------------------------------------------------------

async function readAllRuns(main: Redis, keys: RedisKeys): Promise<RunRecord[]> {
  const ids = await main.zrange(keys.runIndex(), "0", "-1");
  const runs: RunRecord[] = [];
  for (let i = 0; i < ids.length; i += 200) {
    const batch = await Promise.all(ids.slice(i, i + 200).map((id) => readRun(main, keys, id)));
    for (const run of batch) if (run) runs.push(run);
  }
  return runs;
}

interface JobState {
  state: string;
  failedReason: string | null;
  attemptsStarted: number;
}

async function jobStatesOf(queue: Queue, jobIds: string[]): Promise<Map<string, JobState>> {
  const states = new Map<string, JobState>();
  for (let i = 0; i < jobIds.length; i += 100) {
    const batch = jobIds.slice(i, i + 100);
    const answers = await Promise.all(
      batch.map(async (id) => {
        const [state, job] = await Promise.all([queue.getJobState(id), queue.getJob(id)]);
        return { state, failedReason: job?.failedReason || null, attemptsStarted: job?.attemptsStarted ?? 0 };
      }),
    );
    batch.forEach((id, k) => states.set(id, answers[k]!));
  }
  return states;
}

/** Failures BullMQ decides by itself, at a pickup, without the processor. */
const BULLMQ_OWN_FAILURE = /more than allowable limit/;

/** A failed record saying the queue gave its job up (worker/rebuild-worker.ts QUEUE_GAVE_UP). */
function gaveUpRecord(runs: readonly RunRecord[]): boolean {
  return runs.some((r) => r.status === "failed" && /^the queue gave this job up/.test(r.reason ?? ""));
}

function countDeferred(logDir: string): number {
  let count = 0;
  for (const file of fs.readdirSync(logDir)) {
    const text = fs.readFileSync(path.join(logDir, file), "utf8");
    count += (text.match(/\] deferred \d+ s: /g) ?? []).length;
  }
  return count;
}

// --- small helpers -------------------------------------------------------------------------

/**
 * When Redis could lose writes it had acknowledged: from a crash (SIGKILL) until the killed
 * server is down, or from a crash or asked failover until the new primary serves. A write made
 * before a window's end may be gone after it; nothing written after it is lost by it.
 */
export function redisLossWindows(events: SoakEvent[]): { from: number; to: number }[] {
  const windows: { from: number; to: number }[] = [];
  for (const [index, e] of events.entries()) {
    const failover = e.kind === "redis-failover-asked" || (e.kind === "redis-crash" && e.failover === true);
    if (e.kind !== "redis-crash" && !failover) continue;
    const endKind = failover ? "redis-failover" : "redis-down";
    const end = events.slice(index + 1).find((x) => x.kind === endKind && (failover || x.role === e.role));
    windows.push({ from: e.t, to: end?.t ?? e.t });
  }
  return windows;
}

/**
 * A pointer read at fence `top` (at `fromT`), then lower (at `toT`): Redis data loss that
 * claimwatch repaired when a loss window overlaps the two reads and a later read is back at
 * `top` or higher. Anything else is a rollback.
 */
export function isRepairedCrashDip(
  events: SoakEvent[],
  dip: { claim: string; fromT: number; toT: number; top: number },
): boolean {
  return (
    redisLossWindows(events).some((w) => w.to > dip.fromT && w.from < dip.toT) &&
    events.some((e) => e.kind === "pointer" && e.claim === dip.claim && e.t > dip.toT && Number(e.fence) >= dip.top)
  );
}

/**
 * Whether a run that published (a pointer read named it) may be closed `aborted` by someone else
 * than its attempt: the closer asks the claims Redis's pointer first, and a pointer still naming
 * the run closes it `rebuilt` (lib/rebuilds/published-by-run.ts). Excused when the watcher saw
 * the pointer name another run (or none: a crash, a repair's restore) before the close (2 s for
 * its sampling), or when any Redis fault (restart, freeze, crash, failover) fell between 2 s
 * before the publish was seen and 1 s after the close: the closer's read (1 s at most) may have
 * failed or been answered by a server that had lost the publish.
 */
export function abortedPublishExcused(
  events: SoakEvent[],
  run: { claim: string; runId: string; closedAt: number },
): boolean {
  const publishedAt = events.find((e) => e.kind === "pointer" && e.runId === run.runId)?.t;
  if (publishedAt === undefined) return true;
  const movedOn = events.some(
    (e) =>
      e.kind === "pointer" &&
      e.claim === run.claim &&
      e.t > publishedAt &&
      e.t <= run.closedAt + 2_000 &&
      e.runId !== run.runId,
  );
  const redisFault = events.some(
    (e) => e.kind.startsWith("redis") && e.t >= publishedAt - 2_000 && e.t <= run.closedAt + 1_000,
  );
  return movedOn || redisFault;
}

export function readEvents(file: string): SoakEvent[] {
  if (!fs.existsSync(file)) return [];
  return fs
    .readFileSync(file, "utf8")
    .split("\n")
    .filter(Boolean)
    .map((line) => JSON.parse(line) as SoakEvent);
}

/** A JSON file's value, or null when it cannot be read or parsed. */
function readJsonOrNull(file: string): unknown {
  try {
    return JSON.parse(fs.readFileSync(file, "utf8")) as unknown;
  } catch {
    return null;
  }
}

function asJobs(event: SoakEvent): { jobId: string; attempt: number; runId: string }[] {
  return Array.isArray(event.jobs) ? (event.jobs as { jobId: string; attempt: number; runId: string }[]) : [];
}

function groupBy<T>(items: T[], keyOf: (item: T) => string): Map<string, T[]> {
  const groups = new Map<string, T[]>();
  for (const item of items) {
    const key = keyOf(item);
    const group = groups.get(key);
    if (group) group.push(item);
    else groups.set(key, [item]);
  }
  return groups;
}

function countBy<T>(items: T[], keyOf: (item: T) => string): Map<string, number> {
  const counts = new Map<string, number>();
  for (const item of items) counts.set(keyOf(item), (counts.get(keyOf(item)) ?? 0) + 1);
  return counts;
}

function formatCounts(counts: Map<string, number>, order: string[] = []): string {
  const keys = [...order.filter((k) => counts.has(k)), ...[...counts.keys()].filter((k) => !order.includes(k)).sort()];
  return keys.map((k) => `${k} ${counts.get(k)}`).join(", ") || "none";
}

function sum(values: number[]): number {
  return values.reduce((a, b) => a + b, 0);
}

function isSymlink(file: string): boolean {
  try {
    return fs.lstatSync(file).isSymbolicLink();
  } catch {
    return false;
  }
}

function readLinkOrNull(file: string): string | null {
  try {
    return fs.readlinkSync(file);
  } catch {
    return null;
  }
}
