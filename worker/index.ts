/**
 * The worker process (`npm run worker`; `npm start` runs one). Loads the rebuild definitions,
 * upserts the schedules, processes rebuild jobs, keeps a heartbeat, and repairs `current`
 * symlinks that disagree with the fenced pointer in Redis.
 *
 * SIGTERM/SIGINT (a deploy): running steps are aborted, claims released, jobs handed back to
 * the queue with no failed attempt (another worker starts them at once), then exit 0.
 */
import os from "node:os";
import { Queue } from "bullmq";
import type { AlertEvaluator } from "../lib/alerts/evaluator";
import { CONFIG_EXIT_CODE, loadConfigOrExit } from "../lib/config";
import { describeError } from "../lib/describe-error";
import { abandonedInputReads } from "../lib/rebuilds/version";
import { publishEvent } from "../lib/events/publish";
import { describeDefinitionsError, loadDefinitions, shutdownWaitMs } from "../lib/rebuilds/definitions";
import { clearWorkerRefusal, recordWorkerRefusal } from "../lib/workers/refusal";
import { ContainmentConfigError, detectContainment, publishedBuildsToSteps } from "../lib/rebuilds/steps/containment";
import { killAllSteps } from "../lib/rebuilds/steps/run-step";
import { queuePrefix, REBUILD_QUEUE } from "../lib/rebuilds/queue";
import { checkPublishedBuilds } from "../lib/rebuilds/build-integrity";
import { publishedByRun } from "../lib/rebuilds/published-by-run";
import { settleLegacyWrites } from "../lib/rebuilds/published-fence";
import { repairCurrentLinks, type OnMadeCurrent } from "../lib/rebuilds/repair";
import { closeAbandonedRuns, type SweepCursor } from "../lib/runs/abandoned";
import { startTimelineBackfill } from "../lib/runs/timeline-backfill";
import { trimAllRuns } from "../lib/runs/trim";
import { flushUnansweredFinals, noteMadeCurrent, resendFinalWrite } from "../lib/runs/writer";
import { pruneAbandonedWorkDirs } from "../lib/rebuilds/output";
import { removeTakenWorkDirs, takeLiveWorkDirs } from "../lib/rebuilds/work-dirs";
import { pruneOldBuilds } from "../lib/rebuilds/prune";
import { declaredFields, declareTargets } from "../lib/rebuilds/declared";
import { keepScheduleDigest, schedulesDigest, syncSchedules, type SyncedSchedules } from "../lib/rebuilds/schedules";
import { closeRedis, createRedis } from "../lib/redis/client";
import { measureRedisClock, redisClock, useAsProcessClock } from "../lib/redis/clock";
import { redisKeys } from "../lib/redis/keys";
import { describeRedisTarget } from "../lib/redis/url";
import { RedisNotConfiguredError, resolveRedisUrls } from "../lib/redis/connections";
import { settledWithin } from "../lib/settled-within";
import { APP_VERSION } from "../lib/version";
import { beat, HEARTBEAT_EVERY_MS, newWorkerIdentity, retire } from "../lib/workers/heartbeat";
import { DEFAULT_WORKER_OPTIONS, startRebuildWorker } from "./rebuild-worker";

const config = loadConfigOrExit("claimwatch-worker");
const loaded = loadDefinitions(config.definitionsPath, config.definitionsSource);
if (!loaded.ok) {
  process.stderr.write(`${describeDefinitionsError(loaded.error, "claimwatch-worker: definitions error: ")}\n`);
  // The first problem, with the file's full path (a deploy may have two files of one name), and how many more.
  const { file, problems } = loaded.error;
  const first = loaded.error.message.split("\n")[0] ?? "";
  // `file` is the name the message starts with; the path is the one the worker read (black-box
  // helper-160: resolved from the worker's working directory, it named another file of that name).
  const named = first.startsWith(file) ? `${config.definitionsPath}${first.slice(file.length)}` : first;
  await noteRefusal(problems.length > 1 ? `${named} (and ${problems.length - 1} more)` : named);
  process.exit(CONFIG_EXIT_CODE);
}
const definitions = loaded.definitions;

/**
 * Leaves the refusal where the dashboard reads it (lib/workers/refusal.ts): best effort, within
 * 2 s, as its Redis settings may be what is wrong too.
 */
async function noteRefusal(problem: string): Promise<void> {
  let client: ReturnType<typeof createRedis> | null = null;
  try {
    client = createRedis(resolveRedisUrls(config).main, "worker", "claimwatch-worker:refusal");
    client.on("error", () => {});
    const note = recordWorkerRefusal(client, redisKeys(config.keyPrefix), {
      host: os.hostname(),
      pid: process.pid,
      problem,
    });
    await settledWithin(note, 2_000);
  } catch {
    // no Redis to tell: the log line above is all
  } finally {
    client?.disconnect();
  }
}
let urls;
try {
  urls = resolveRedisUrls(config);
} catch (error) {
  if (!(error instanceof RedisNotConfiguredError)) throw error;
  process.stderr.write(`claimwatch-worker: configuration error: ${error.message}\n`);
  process.exit(CONFIG_EXIT_CODE);
}

const concurrency = config.workerConcurrency;
const keys = redisKeys(config.keyPrefix);
const main = createRedis(urls.main, "worker", "claimwatch-worker");
const claims = createRedis(urls.claims, "claims", "claimwatch-worker:claims");
let containment;
try {
  containment = detectContainment();
} catch (error) {
  if (!(error instanceof ContainmentConfigError)) throw error;
  process.stderr.write(`claimwatch-worker: configuration error: ${error.message}\n`);
  process.exit(CONFIG_EXIT_CODE);
}
const identity = newWorkerIdentity(APP_VERSION, {
  containment: containment.mode,
  limitedStepsContainment: containment.forLimitedSteps?.mode,
  publishedBuilds: publishedBuildsToSteps(containment),
  schedulesDigest: schedulesDigest(definitions),
  declares: declaredFields(definitions),
});
const log = (line: string) => process.stdout.write(`[worker ${identity.id}] ${line}\n`);

const queue = new Queue(REBUILD_QUEUE, { connection: main, prefix: queuePrefix(keys) });
// Without a listener BullMQ prints a stack for every failed reconnect (a failover prints dozens);
// the heartbeat already reports an unreachable Redis once.
queue.on("error", () => {});
const retention = { maxPerRebuild: definitions.retention.runs, maxAgeMs: definitions.retention.runAge };
const { worker, running } = startRebuildWorker(
  {
    connection: main,
    queue,
    main,
    claims,
    keys,
    definitions,
    worker: identity,
    log,
    retention,
    ...(config.inputsVisibleAfterMs === undefined ? {} : { inputsVisibleAfterMs: config.inputsVisibleAfterMs }),
  },
  // Jobs are taken once this process's clock is the Redis clock (below).
  { ...DEFAULT_WORKER_OPTIONS, concurrency, autorun: false },
);

/**
 * Trimming run records and pruning old builds: once a minute per worker, and at the next heartbeat
 * after it finished 100 jobs or fell idle after finishing some (records never pile up for long).
 */
const MAINTENANCE_EVERY_MS = 60_000;
const MAINTENANCE_AFTER_JOBS = 100;
let lastMaintenance = -MAINTENANCE_EVERY_MS; // monotonic ms: the first upkeep maintains
/** How often a running worker renews what its definitions declare (its start declares them first). */
const DECLARE_EVERY_MS = 3_600_000;
let lastDeclared = performance.now();
let processedAtMaintenance = 0;
let lastBeatFailed = false;
let lastUpkeepFailed = false;
const sweepCursor: SweepCursor = { running: 0, queued: 0 };
/** Set by the first SIGTERM/SIGINT (shutdown). */
let stopping = false;
/** The upkeep after a beat, while one runs (sweep, repair, maintenance): one at a time. */
let upkeep: Promise<void> | null = null;
/** How long a stop waits for an upkeep under way (a prune holding an output's claim) to end. */
const UPKEEP_STOP_WAIT_MS = 10_000;
/** How long a stopping worker sends unanswered final records again (beside its other 2 s of stop work). */
const FINALS_FLUSH_MS = 2_500;
let upkeepStartedAt = 0;
let upkeepSlowSaid = false;
/** The beat under way (or the last one): the stop retires the heartbeat after it, never before. */
let beating: Promise<unknown> = Promise.resolve();
async function heartbeat(): Promise<void> {
  let judgesOthers: boolean;
  try {
    const upkeepRunningMs = upkeep ? performance.now() - upkeepStartedAt : 0;
    const sent = beat(main, keys, identity, running.ids().join(",") || null, {
      upkeepRunningMs: upkeepRunningMs >= config.upkeepSlowMs ? upkeepRunningMs : null,
    });
    beating = sent.catch(() => {});
    ({ judgesOthers } = await sent);
  } catch (error) {
    if (!lastBeatFailed) log(`heartbeat failed (will keep trying): ${describeError(error)}`);
    lastBeatFailed = true;
    return;
  }
  if (lastBeatFailed) log("heartbeat restored");
  lastBeatFailed = false;
  keepDigestBesideBeat();
  // One upkeep at a time: a slow one (a big prune, a slow disk) is not run again beside itself;
  // the beats go on. None starts once the worker is stopping.
  if (upkeep) return sayIfUpkeepSlow();
  if (stopping) return;
  // Not awaited: the start-up beat does not wait for the first upkeep (a long prune) either.
  upkeepStartedAt = performance.now();
  upkeep = upkeepAfterBeat(judgesOthers).finally(() => {
    upkeep = null;
    if (upkeepSlowSaid) log(`upkeep after the heartbeat ended after ${secondsSince(upkeepStartedAt)} s`);
    upkeepSlowSaid = false;
  });
}

const secondsSince = (at: number) => Math.round((performance.now() - at) / 1000);

/** Said once per upkeep: until it ends, no other worker's dead run is closed by this one, no `current` repaired, no records trimmed. */
function sayIfUpkeepSlow(): void {
  if (upkeepSlowSaid || performance.now() - upkeepStartedAt < config.upkeepSlowMs) return;
  upkeepSlowSaid = true;
  log(
    `upkeep after the heartbeat still running after ${secondsSince(upkeepStartedAt)} s (a hung disk or an unanswered Redis command?); no sweep, repair or maintenance runs until it ends`,
  );
}

async function upkeepAfterBeat(judgesOthers: boolean): Promise<void> {
  try {
    // The sweep first, right after the beat: RUN_ABANDON wants the sweeper's last beat recent
    // (BEAT_STREAK.freshMs).
    const self = {
      workerId: identity.id,
      activeJobIds: () => running.ids(),
      judgesOthers,
      cursor: sweepCursor,
      // Its own record back in flight though the attempt ended (the main Redis lost the write).
      resendFinal: async (runId: string) => {
        const result = await resendFinalWrite(runId);
        if (result === "written")
          log(`sent the final record of run ${runId} again: it was in flight, as if the main Redis had lost it`);
        return result;
      },
      // A record that was about to publish: closed rebuilt when its publish is proven.
      publishedBy: (run: { runId: string; rebuild: string | null; tenant: string | null }) =>
        publishedByRun({ claims, keys, definitions }, run),
    };
    for (const runId of await closeAbandonedRuns({ client: main, keys, retention }, self))
      log(`closed abandoned run ${runId}`);
    // A run whose build repair made current though its record ended otherwise (a full disk) says so.
    const noteOnRun: OnMadeCurrent = async ({ runId, fence, buildHash, definition, claim }) =>
      (await noteMadeCurrent({ client: main, keys }, runId, {
        fence,
        buildHash,
        idempotencyTtlMs: definition.idempotency.ttl,
        lane: claim,
      }))
        ? `run ${runId}'s record now says its build was made current later (it had ended without a publish of its own)`
        : null;
    for (const line of await repairCurrentLinks(claims, keys, definitions, noteOnRun)) log(line);
    await checkSchedules();
    const sinceMaintenance = running.processed() - processedAtMaintenance;
    const busy = sinceMaintenance >= MAINTENANCE_AFTER_JOBS;
    const settled = sinceMaintenance > 0 && running.ids().length === 0;
    // Not once the worker is stopping (its jobs handed back count as processed): a prune then
    // would take claims the stop must not leave held.
    if (!stopping && (busy || settled || performance.now() - lastMaintenance >= MAINTENANCE_EVERY_MS)) {
      lastMaintenance = performance.now();
      processedAtMaintenance = running.processed();
      await trimAllRuns(main, keys, definitions, retention);
      // Renewed while this worker runs (lib/rebuilds/declared.ts): scheduled ticks renew nothing,
      // and a fleet of mixed definitions may last longer than a declaration counts (review helper-156).
      if (performance.now() - lastDeclared >= DECLARE_EVERY_MS) {
        await declareTargets(main, keys, definitions);
        lastDeclared = performance.now();
      }
      await pruneAbandonedWorkDirs(definitions);
      const pruneClaims = { client: claims, keys, workerId: identity.id, stopping: () => stopping };
      for (const line of await pruneOldBuilds(definitions, pruneClaims)) {
        if (!line.includes("pruned later")) log(line);
      }
    }
    if (lastUpkeepFailed) log("upkeep after the heartbeat restored");
    lastUpkeepFailed = false;
  } catch (error) {
    if (!lastUpkeepFailed) log(`upkeep after the heartbeat failed (will keep trying): ${describeError(error)}`);
    lastUpkeepFailed = true;
  }
}

async function syncSchedulesAndSay(): Promise<void> {
  // Before the schedules: their ticks are jobs for these rebuilds, which a worker of older
  // definitions then keeps for one that declares them (lib/rebuilds/declared.ts).
  await declareTargets(main, keys, definitions).catch((error: unknown) =>
    log(
      `could not note the declared rebuilds (a worker of other definitions fails their jobs): ${describeError(error)}`,
    ),
  );
  try {
    const synced = await syncSchedules(queue, definitions, main, keys, identity.id);
    const { upserted, removed, paused, failed } = synced;
    log(
      `schedules: ${upserted.length} upserted${removed.length ? `, removed ${removed.join(", ")}` : ""}${paused.length ? `; paused by an operator: ${paused.join(", ")}` : ""}`,
    );
    sayOtherDefinitions(synced);
    for (const { id, message } of failed)
      log(`could not upsert schedule ${id} (checked again every minute): ${message}`);
  } catch (error) {
    log(`could not sync schedules (will run jobs anyway; checked again every minute): ${describeError(error)}`);
  }
}

/** Said when it changes: schedules kept as workers of other definitions ask (lib/rebuilds/schedule-wants.ts). */
let saidOthers = "";
function sayOtherDefinitions({ asOthersAsk, keptForOthers, otherWorkers }: SyncedSchedules): void {
  const said = asOthersAsk.length + keptForOthers.length > 0 ? `${asOthersAsk}|${keptForOthers}|${otherWorkers}` : "";
  if (said === saidOthers) return;
  if (said)
    log(
      `schedules: workers of other definitions run (${otherWorkers.join(", ")}): ${[
        asOthersAsk.length ? `left as their file asks: ${asOthersAsk.join(", ")}` : "",
        keptForOthers.length ? `kept for them: ${keptForOthers.join(", ")}` : "",
      ]
        .filter(Boolean)
        .join("; ")} (until none of those runs)`,
    );
  else if (saidOthers) log("schedules: every live worker runs these definitions now; the schedules follow them");
  saidOthers = said;
}

/**
 * Every minute, the schedules are synced again (`syncSchedules`): a tick lost (a Redis crash that
 * lost its last writes, a worker that died as it queued the next one, an upsert refused at start)
 * would end the schedule for good, until some worker started again; and once the workers of other
 * definitions have gone, the schedules follow this file.
 */
const SCHEDULE_CHECK_EVERY_MS = 60_000;
/**
 * The schedules digest of this worker's definitions is kept alive beside the beat, not in the
 * upkeep (a long prune there would let it expire: the dashboard would go by its own file).
 */
let lastDigestKeep = performance.now();
function keepDigestBesideBeat(): void {
  if (stopping || !announcedUp || performance.now() - lastDigestKeep < SCHEDULE_CHECK_EVERY_MS / 2) return;
  lastDigestKeep = performance.now();
  void keepScheduleDigest(main, keys, definitions).catch(() => {});
}
/** The start-up's sync is the first check (monotonic clock: `Date.now` becomes the Redis clock). */
let lastScheduleCheck = performance.now();
let lastScheduleCheckFailed = false;
async function checkSchedules(): Promise<void> {
  if (stopping || performance.now() - lastScheduleCheck < SCHEDULE_CHECK_EVERY_MS) return;
  lastScheduleCheck = performance.now();
  try {
    const synced = await syncSchedules(queue, definitions, main, keys, identity.id);
    const { repaired, removed, failed } = synced;
    sayOtherDefinitions(synced);
    for (const id of repaired)
      log(`schedule ${id} was missing, not as the definitions ask, or had no next tick queued: upserted again`);
    if (removed.length > 0) log(`schedules removed (no live worker's definitions have them): ${removed.join(", ")}`);
    if (synced.removalsPostponed)
      log("schedules: this check took too long to remove schedules on what it read; the next one decides again");
    for (const { id, message } of failed)
      log(`could not upsert schedule ${id} (checked again in a minute): ${message}`);
    lastScheduleCheckFailed = false;
  } catch (error) {
    // Said once; the rest of the upkeep goes on.
    if (!lastScheduleCheckFailed) log(`could not check the schedules (again in a minute): ${describeError(error)}`);
    lastScheduleCheckFailed = true;
  }
}

/** Published builds re-hashed now and then (one output per minute at most; build-integrity.ts). */
let checkingBuilds = false;
async function checkBuilds(): Promise<void> {
  if (checkingBuilds || stopping) return;
  checkingBuilds = true;
  try {
    for (const line of await checkPublishedBuilds(main, keys, definitions, identity.id)) log(line);
  } catch (error) {
    log(`build check failed (will try again): ${describeError(error)}`);
  } finally {
    checkingBuilds = false;
  }
}
const buildCheckTimer = setInterval(() => void checkBuilds(), 60_000);
// The beats go on until the stop has handed the jobs back (also a stop during the start-up).
const beatTimer = setInterval(() => void heartbeat(), HEARTBEAT_EVERY_MS);
/** Set going by the start-up below, if it gets that far before a stop. */
let alerting: AlertEvaluator | null = null;
let announcedUp = false;
const backfill = new AbortController();

// A stray rejection must not take down a worker that holds claims: log it loudly instead.
process.on("unhandledRejection", (reason) => {
  log(
    `unhandled rejection (a bug; please report): ${reason instanceof Error ? (reason.stack ?? reason.message) : String(reason)}`,
  );
});

async function shutdown(signal: NodeJS.Signals): Promise<void> {
  if (stopping) return;
  backfill.abort();
  stopping = true;
  const jobs = running.ids();
  log(`${signal}: stopping${jobs.length ? `; handing back ${jobs.join(", ")}` : ""}`);
  void alerting?.stop();
  // The heartbeat goes on until the jobs are handed back: a worker that waits out a long killGrace
  // is alive, and another worker must not close its runs as abandoned meanwhile.
  clearInterval(buildCheckTimer);
  // Abort running steps (SIGTERM, SIGKILL after their killGrace); each processor then releases
  // its claim and moves its job back to waiting. The wait follows the longest killGrace, so a
  // step is dead before its job can start elsewhere; whatever is left after it is SIGKILLed here
  // (and would die with this process anyway: their init watches a pipe only this process holds).
  running.abortAll("shutdown");
  // No upkeep starts once stopping; the one under way (if any) is waited for beside the jobs, so
  // the whole stop stays within the jobs' wait plus STOP_AFTER_JOBS_MS (npm start's limit).
  const upkeepEnded = upkeep ? settledWithin(upkeep, UPKEEP_STOP_WAIT_MS) : Promise.resolve(true);
  const wait = shutdownWaitMs(definitions);
  const closed = await settledWithin(worker.close(), wait);
  if (!closed) {
    const killed = killAllSteps();
    log(`shutdown: jobs not handed back within ${wait} ms${killed ? `; killed ${killed} step(s)` : ""}`);
  }
  clearInterval(beatTimer);
  // An upkeep under way ends before the connections close: a prune holds an output's claim, and
  // a stop that cut it off would leave the claim held for its TTL (the Sentinel soak saw one).
  await upkeepEnded;
  // Still under way (`.finally` clears it): held up in a system call that may never return (a
  // hung disk), which would hold `process.exit` too — the exit ends with SIGKILL then.
  const upkeepStuck = upkeep !== null;
  if (upkeepStuck) log(`shutdown: the upkeep after the last beat did not end within ${UPKEEP_STOP_WAIT_MS} ms`);
  // Every wait on Redis from here on is bounded: a frozen Redis (SIGSTOP, a hung host) takes the
  // commands and never answers, and the stop must end anyway. What it could not say is said by
  // time instead: the heartbeat expires, BullMQ's stalled check hands the jobs back, the claims
  // run out on their TTL.
  // Beside them, the work dirs of attempts that have not ended (held on a Redis that does not
  // answer, or sealing a big build): taken from their attempts by a rename (lib/rebuilds/work-dirs.ts).
  const taking = takeLiveWorkDirs();
  // Beside them too: final records Redis never answered (a failover's NOREPLICAS as an attempt
  // ended), sent again while there is time; the process would take them along (writer.ts).
  const flushing = flushUnansweredFinals(FINALS_FLUSH_MS).then((runIds) => {
    for (const runId of runIds)
      log(`shutdown: sent the final record of run ${runId} again (Redis had not answered it)`);
  });
  // Beside them: background writes of the legacy publish list (lib/rebuilds/published-fence.ts),
  // for workers of the previous version, given a moment to take their lock.
  const legacyDropped = settleLegacyWrites(2_000);
  const [dirsTaken, ...answered] = await Promise.all([
    settledWithin(taking, 2_000),
    settledWithin(queue.close(), 2_000),
    // After a beat still under way (a first beat waits for a TIME answer before it writes): a
    // retire sent first would be undone by it, the worker listed live until its heartbeat expires.
    settledWithin(
      beating.then(() => retire(main, keys, identity.id)),
      2_000,
    ),
    !announcedUp || settledWithin(publishEvent(main, keys, { type: "worker.down", id: identity.id }), 2_000),
    settledWithin(flushing, FINALS_FLUSH_MS + 500),
    // Records of jobs the queue gave up, still waiting on the attempt before theirs: written now.
    settledWithin(running.settleGivenUp(), 2_000),
  ]);
  const dropped = await legacyDropped;
  if (dropped.outputs > 0)
    log(
      `shutdown: the legacy file .published-fence of ${dropped.outputs} output(s) not updated (its lock was held, or the write did not end in time): ${dropped.runs} publish(es) not listed there and its fence not raised; workers of the previous version may not see them`,
    );
  let removingDirs: Promise<void> = Promise.resolve();
  if (!dirsTaken) {
    log(
      "shutdown: the work dirs of unfinished attempts could not be moved aside within 2 s (a hung disk?); ending with SIGKILL",
    );
  } else {
    const taken = await taking;
    if (taken.length > 0) {
      log(`shutdown: removing the work dirs of ${taken.length} unfinished attempt(s)`);
      removingDirs = removeTakenWorkDirs(taken);
    }
  }
  if (!answered.every(Boolean))
    log(
      "shutdown: Redis did not answer the stop; the heartbeat expires on its own, jobs not handed back are redelivered by the stalled check and claims end on their TTL",
    );
  // Within STOP_AFTER_JOBS_MS of the jobs' wait, with the 3 s above (lib/rebuilds/definitions.ts).
  // The taken work dirs' delete gets the same second; one cut short is left to the prune.
  await Promise.all([closeRedis(main, 1_000), closeRedis(claims, 1_000), settledWithin(removingDirs, 1_000)]);
  const stuck = abandonedInputReads();
  // process.exit would wait for the thread pool, where those reads may be blocked for good: the
  // exit ends with SIGKILL then (lib/rebuilds/version.ts).
  if (stuck > 0) log(`shutdown: ${stuck} input read(s) stuck in a system call (a hung mount?); ending with SIGKILL`);
  if (upkeepStuck || !dirsTaken) {
    if (upkeepStuck)
      log(
        "shutdown: ending with SIGKILL (the upkeep may be stuck in a system call, or waiting on a Redis that does not answer)",
      );
    // A rename still in the thread pool would hold process.exit as well. From an exit listener,
    // the last one added: the earlier ones (the step cgroups' parent is removed by one) still
    // run; only the wait for the thread pool is cut short.
    process.once("exit", () => process.kill(process.pid, "SIGKILL"));
  }
  process.exit(0);
}
// Before the first wait on Redis: a stop during the start-up (a deploy right after a deploy, a
// Redis that does not answer yet) still hands the jobs back and releases the claims; without a
// handler, SIGTERM would end the process on the spot, as a crash does.
process.on("SIGTERM", (signal) => void shutdown(signal));
process.on("SIGINT", (signal) => void shutdown(signal));
log(`starting: version ${APP_VERSION}, pid ${process.pid}, Redis ${describeRedisTarget(urls.main)}`);

await heartbeat();
// BullMQ compares its delays and schedule ticks with the clock of each process that looks at them:
// this process's `Date.now` becomes the Redis clock (lib/redis/clock.ts) before it takes a job or
// upserts a schedule. The first beat measured it; a Redis that did not answer is asked until it does.
while (!stopping && !redisClock.learned()) {
  await settledWithin(measureRedisClock(main), 2_000);
  if (!redisClock.learned()) await new Promise((r) => setTimeout(r, 1_000));
}
if (!stopping) {
  useAsProcessClock();
  worker.run().catch((error: unknown) => log(`worker stopped taking jobs: ${describeError(error)}`));
}
if (!stopping) {
  announcedUp = true;
  void publishEvent(main, keys, { type: "worker.up", id: identity.id, host: identity.host, pid: identity.pid });
  await syncSchedulesAndSay();
}
if (!stopping) {
  log(`step containment: ${containment.mode}: ${containment.detail}`);
  log(
    `ready: ${definitions.rebuilds.size} rebuild(s) from ${definitions.file}, concurrency ${concurrency}, Redis ${describeRedisTarget(urls.main)}`,
  );
  // A start that refused its file before this one is over.
  void clearWorkerRefusal(main, keys).catch(() => {});
  // Finished runs from before the timeline counters (an upgrade) counted once, in the background.
  void startTimelineBackfill(main, keys, { retention, log, signal: backfill.signal });
}
// Alert evaluation (when claimwatch.yaml has `alerts:`): one process of all evaluates at a time.
// Loaded only then: a worker without alerts starts as fast as before.
if (definitions.alerts) {
  const { startAlerting } = await import("../lib/alerts/start");
  if (!stopping)
    alerting = startAlerting({
      main,
      claims,
      keys,
      definitions,
      schedulers: queue,
      config,
      workerId: identity.id,
      role: "worker",
      log,
    });
}
