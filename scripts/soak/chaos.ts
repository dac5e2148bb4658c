/**
 * Chaos against the workers and Redis while triggers stream in. A plan is drawn up front:
 * guaranteed actions at fixed fractions of the soak (so even a 45 s soak has a kill, a pause
 * longer than the claim TTL, a deploy and a Redis restart), plus random ones in between.
 *
 *   kill      SIGKILL a worker (preferably one running a job); a replacement starts at once
 *   kill-reading  the same, aimed at a worker while it reads a hashed rebuild's inputs (its record
 *             running, no version yet: a window of a few hundred ms per job, which random actions
 *             rarely hit); watched for up to 10 s, else any busy worker (event field `reading`)
 *   pause     SIGSTOP a worker, SIGCONT after 0.3–1.5 s or 3–9 s (longer than the 2.5 s
 *             claim TTL; beyond 5 s also longer than BullMQ's job lock, when the worker's step
 *             warden must end its steps: the sampler counts one alive after 6 s as escaped);
 *             one guaranteed pause lasts 7.5–9 s (past the lock, so the warden is always tried)
 *   deploy    SIGTERM a worker (it hands its jobs back); a replacement starts at once
 *   redis     SIGTERM redis-server (AOF everysec, fsynced on shutdown), 0.3–2.5 s down, start
 *             it again on the same port with the same data
 *   redis-freeze  SIGSTOP the main redis-server for 1.5–4 s (a hung host: connections stay open,
 *             nothing is answered), and deploy a busy worker 0.3 s into it
 *   redis-freeze-long  the same for 3 s longer than a stop may take (the pool's stop grace, what
 *             `npm start` gives a worker): the deployed worker's stop cannot hand anything back
 *             and must still end on its own, frozen throughout (a stop that outlives the grace
 *             is a `worker-stop-timeout`, counted as hung_stops). Meanwhile every heartbeat,
 *             claim and job lock runs out. Both: not with `--redis sentinel`, where a frozen
 *             primary is a failover the sentinels start on their own
 *   redis-crash  the same with SIGKILL: AOF everysec may lose its last second of writes (issue 14);
 *             with a separate claims Redis (`--claims separate`) it is the claims Redis that
 *             crashes — with `--claims-persistence rdb`, losing everything since its last snapshot
 *             With `--redis sentinel` both are failovers of the main Redis (a primary, two
 *             asynchronous replicas, three sentinels): `redis` asks the sentinels for one
 *             (`SENTINEL FAILOVER`, the primary demoted while it runs), `redis-crash` SIGKILLs the
 *             primary, the sentinels promote a replica after 1 s of silence, and the killed
 *             server comes back as the new primary's replica; writes the replica had not received
 *             are lost either way
 *   force-release  an operator force-releases a live claim (the token shown), while the trigger
 *             stream keeps asking for other versions: the holder's request must not be lost
 *   fence-disk  the outputs' disk refuses the published-fence record for 2.5–4.5 s: every
 *             link(2) of every live worker answers ENOSPC (strace inject; the record is the
 *             only link a worker makes), as a disk that fills between a build and its record.
 *             A publish made then lives in the claims Redis only: its attempt fails as
 *             transient and the next publishes again. One such window always ends just after
 *             the guaranteed redis-crash, which may forget such a publish
 *   disk-full  the outputs' disk (a tmpfs the soak mounts, when it may) is filled to its last
 *             byte for 1.5–3.5 s, then freed: steps' writes fail (their exit 75 is declared
 *             transient), and so do the workers' own (work dirs, holding marks, builds, fence
 *             records, `current`); every request must still end rebuilt, nothing half-written
 *             may be published and `current` must end at the pointer
 *   slow-swap  a publisher held up inside its swap of `current` while a newer fence publishes and
 *             swaps (black-box helper-146), made to happen rather than met by chance. Every
 *             symlink(2) of one worker (the one whose run of a rebuild that is not hashed is
 *             furthest along) is held back 1.5–2 s (strace inject on all its threads) for up to
 *             8 s. Once the Redis pointer names one of its runs and that output's `current` has
 *             lagged behind it for 200 ms, the run is inside its held-back swap (its fence record
 *             read, its rename to come). The worker is then SIGSTOPped (a `pause` event; it takes
 *             no job meanwhile), that claim force-released as `force-release` does, and the
 *             output's next version asked for at once. A force release keeps the claim from
 *             others until its holder acknowledges or the release window ends (~6 s), so the
 *             worker stays paused until the pointer names a newer fence with other bytes, and
 *             0.5 s more (at most 15 s), then SIGCONT. Its rename puts its older build in place,
 *             and its re-read of the record follows the newer one through another held-back
 *             symlink. Without the swap lock the newer publisher swapped meanwhile, so `current`
 *             goes back for 1.5–2 s (`rolled_back`); with it, the newer swap waits (5 s at most,
 *             more than the 0.5 s and the held-back follow), and `current` only moves forward.
 *             Meanwhile other actions spare the victim and the holders of that claim. Events:
 *             `slow-swap-traced`, `slow-swap` (inside its swap, released), `slow-swap-end` (what
 *             `current` named, sampled every 10 ms; `wentBack`), or a `chaos-skip` saying why not
 *             (no busy worker, no strace, no publish of the victim within 8 s)
 *
 * Each action is an event with what the victim was running (from the running-runs index), so
 * the checker can time kill→resume and tell a paused holder from an orphaned one.
 */
import { spawn, spawnSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import type { Queue } from "bullmq";
import type { Redis } from "ioredis";
import { forceReleaseClaim, listClaims, readClaim, readPublished, type ClaimInfo } from "../../lib/claims";
import { outputDirOf, type Definitions } from "../../lib/rebuilds/definitions";
import { readCurrent } from "../../lib/rebuilds/output";
import { PRUNING_VERSION } from "../../lib/rebuilds/prune";
import { CURRENT_LOCK_FILE } from "../../lib/rebuilds/current-lock";
import { publishedRunLinkName } from "../../lib/rebuilds/published-fence";
import type { RedisKeys } from "../../lib/redis/keys";
import { readRun } from "../../lib/runs/records";
import { fillToLastByte } from "../faults/small-disk";
import type { RunRecord } from "../../lib/runs/types";
import {
  CLAIM_TTL_MS,
  claimLabel,
  HASHED_REBUILDS,
  sleep,
  withTimeout,
  type EventLog,
  SoakRedis,
  type SoakRedisServer,
  type SoakClaimRef,
  type SoakWorker,
  type WorkerPool,
} from "./bed";

export type ChaosKind =
  | "kill"
  | "kill-reading"
  | "pause-short"
  | "pause-long"
  | "pause-past-lock"
  | "deploy"
  | "redis"
  | "redis-crash"
  | "redis-freeze"
  | "redis-freeze-long"
  | "force-release"
  | "fence-disk"
  | "disk-full"
  | "slow-swap";

export interface ChaosAction {
  at: number;
  kind: ChaosKind;
}

export interface ChaosOptions {
  pool: WorkerPool;
  redis: SoakRedisServer;
  events: EventLog;
  main: Redis;
  /** The claims Redis (force releases). */
  claims: Redis;
  /** The claims Redis's server when it is separate from `redis` (its crashes: `redis-crash`). */
  claimsRedis?: SoakRedis;
  keys: RedisKeys;
  queue: Queue;
  random: () => number;
  workers: number;
  /** Redelivery watches of killed jobs; they outlive the chaos phase (await them after the drain). */
  redeliveries: Promise<void>[];
  startedAt: number;
  until: number;
  /** The step journals (`<rebuild>.journal`): which runs' steps are writing right now. */
  journalDir?: string;
  /** The outputs' own filesystem (a tmpfs the soak mounted), which `disk-full` fills; none: skipped. */
  fullableDisk?: string;
  /** Triggers the next version of an output at once (the trigger stream's). */
  newVersion?: (ref: SoakClaimRef, why: string) => Promise<void>;
  /** The rebuilds' definitions (where each output's `current` is: `slow-swap`); none: skipped. */
  definitions?: Definitions;
}

/** Guaranteed actions (fraction of the soak → kind), then random ones about every 5 s. */
export function chaosPlan(startedAt: number, durationMs: number, random: () => number): ChaosAction[] {
  const guaranteed: [number, ChaosKind][] = [
    [0.15, "kill"],
    [0.28, "pause-long"],
    [0.48, "pause-past-lock"],
    [0.42, "redis"],
    [0.55, "deploy"],
    [0.68, "kill-reading"],
    [0.8, "pause-short"],
    [0.35, "force-release"],
    [0.58, "fence-disk"],
    [0.62, "redis-crash"],
    [0.75, "force-release"],
    [0.52, "disk-full"],
    [0.32, "redis-freeze"],
    [0.82, "redis-freeze-long"],
    // Early, before the first kill and Redis fault: its pause lasts until a newer fence publishes
    // (up to 15 s), which a Redis fault meanwhile would hold up.
    [0.04, "slow-swap"],
  ];
  if (durationMs >= 120_000) guaranteed.push([0.9, "redis"]);
  const plan: ChaosAction[] = guaranteed.map(([fraction, kind]) => ({ at: startedAt + fraction * durationMs, kind }));
  const randomKinds: [ChaosKind, number][] = [
    ["kill", 0.17],
    ["pause-short", 0.14],
    ["pause-long", 0.2],
    ["deploy", 0.2],
    ["redis", 0.04],
    ["redis-crash", 0.04],
    ["redis-freeze", 0.04],
    ["force-release", 0.1],
    ["slow-swap", 0.03],
    ["fence-disk", 0.04],
    ["disk-full", 0.04],
  ];
  // Random actions start after the first guaranteed one and stop 10% before the end.
  for (let at = startedAt + 0.15 * durationMs; ;) {
    at += 2_500 + random() * 5_000;
    if (at > startedAt + 0.9 * durationMs) break;
    let roll = random();
    let kind: ChaosKind = "kill";
    for (const [candidate, weight] of randomKinds) {
      if (roll < weight) {
        kind = candidate;
        break;
      }
      roll -= weight;
    }
    plan.push({ at, kind });
  }
  // Random actions keep MIN_GAP_MS from every other action, so each one's effect can be told
  // apart; the guaranteed ones always stay.
  const fixed = plan.slice(0, guaranteed.length);
  const kept: ChaosAction[] = [...fixed];
  for (const action of plan.slice(guaranteed.length)) {
    if (kept.every((other) => Math.abs(other.at - action.at) >= MIN_GAP_MS)) kept.push(action);
  }
  return kept.sort((a, b) => a.at - b.at);
}

const MIN_GAP_MS = 1_500;

/** Runs the plan; background work (resumes, replacements) is awaited before it returns. */
export async function runChaos(options: ChaosOptions, plan: ChaosAction[]): Promise<void> {
  const { pool, events, random } = options;
  const background = new Set<Promise<unknown>>();
  const track = (promise: Promise<unknown>) => {
    const tracked = promise.catch((error: unknown) => events.record("chaos-error", { error: String(error) }));
    background.add(tracked);
    void tracked.finally(() => background.delete(tracked));
  };
  const replace = () => track(startReplacement(pool, events));
  const pauses = new Map<SoakWorker, { timer: NodeJS.Timeout; done: () => void }>();

  for (const action of plan) {
    if (Date.now() >= options.until) break;
    const wait = action.at - Date.now();
    if (wait > 0) await sleep(Math.min(wait, options.until - Date.now()));
    if (Date.now() >= options.until) break;
    // Keep the pool at its size: a replacement that failed to start (Redis down) is retried here.
    for (let missing = options.workers - pool.live().length; missing > 0; missing--) replace();

    if (action.kind === "redis" || action.kind === "redis-crash") {
      // A separate claims Redis is the one that crashes (it holds the fences and pointers).
      const target = action.kind === "redis-crash" && options.claimsRedis ? options.claimsRedis : options.redis;
      await target.restart(300 + random() * 2_200, events, { crash: action.kind === "redis-crash" });
      continue;
    }
    if (action.kind === "redis-freeze" || action.kind === "redis-freeze-long") {
      if (!(options.redis instanceof SoakRedis)) {
        events.record("chaos-skip", { action: action.kind, why: "a Sentinel group: a frozen primary is a failover" });
        continue;
      }
      // Chosen before the freeze: the running-runs index is in the Redis about to be frozen.
      const victim = await chooseVictim(options, "deploy");
      const ms = action.kind === "redis-freeze-long" ? pool.stopGraceMs + 3_000 : 1_500 + random() * 2_500;
      const freeze = options.redis.freeze(ms, events);
      await sleep(300);
      if (victim && !victim.worker.leaving && victim.worker.exitedAt === null) {
        const jobs = victim.running.map((r) => ({ jobId: r.jobId, attempt: r.attempt, runId: r.id }));
        events.record("deploy", { pid: victim.worker.pid, workerId: victim.worker.id, jobs, during: action.kind });
        track(pool.stop(victim.worker));
        replace();
      }
      await freeze;
      continue;
    }
    if (action.kind === "fence-disk") {
      track(refuseFenceRecords(options, 2_500 + random() * 2_000));
      continue;
    }
    if (action.kind === "disk-full") {
      track(fillDisk(options, 1_500 + random() * 2_000));
      continue;
    }
    if (action.kind === "slow-swap") {
      track(slowSwap(options, 1_500 + random() * 500));
      continue;
    }
    if (action.kind === "force-release") {
      await forceReleaseOne(options).catch((error: unknown) =>
        events.record("chaos-error", { action: action.kind, error: String(error) }),
      );
      continue;
    }
    const victim =
      action.kind === "kill-reading"
        ? ((await readingVictim(options, 10_000)) ?? (await chooseVictim(options, "kill")))
        : await chooseVictim(options, action.kind);
    if (!victim) {
      events.record("chaos-skip", { action: action.kind, why: "no worker to act on" });
      continue;
    }
    const jobs = victim.running.map((r) => ({ jobId: r.jobId, attempt: r.attempt, runId: r.id }));
    const worker = victim.worker;
    if (action.kind === "kill" || action.kind === "kill-reading") {
      worker.leaving = true;
      pool.signal(worker, "SIGKILL");
      const reading = victim.running.some((r) => r.version === null && HASHED_REBUILDS.has(r.rebuild));
      const kill = events.record("kill", { pid: worker.pid, workerId: worker.id, jobs, reading });
      for (const job of jobs) options.redeliveries.push(watchRedelivery(options, job.jobId, kill.t));
      replace();
    } else if (action.kind === "deploy") {
      events.record("deploy", { pid: worker.pid, workerId: worker.id, jobs });
      track(pool.stop(worker));
      replace();
    } else {
      const ms =
        action.kind === "pause-past-lock"
          ? 7_500 + random() * 1_500
          : action.kind === "pause-long"
            ? CLAIM_TTL_MS + 500 + random() * 6_000
            : 300 + random() * 1_200;
      worker.paused = true;
      pool.signal(worker, "SIGSTOP");
      events.record("pause", { pid: worker.pid, workerId: worker.id, ms: Math.round(ms), jobs });
      track(
        new Promise<void>((resolve) => {
          const done = () => {
            pauses.delete(worker);
            resume(pool, events, worker);
            resolve();
          };
          pauses.set(worker, { timer: setTimeout(done, ms), done });
        }),
      );
    }
  }
  // End of the chaos phase (not of the plan): resume every worker still paused, then wait for
  // the replacements and deploys.
  if (options.until > Date.now()) await sleep(options.until - Date.now());
  for (const { timer, done } of [...pauses.values()]) {
    clearTimeout(timer);
    done();
  }
  await Promise.race([Promise.all([...background]), sleep(60_000)]);
}

/**
 * Every link(2) of every live worker answers ENOSPC for `ms` (strace attached to each thread;
 * SIGINT detaches it). Workers started meanwhile are not affected, as a replacement on another
 * disk would not be. Without strace the action is skipped (and says so).
 */
async function refuseFenceRecords(options: ChaosOptions, ms: number): Promise<void> {
  // A thread has one tracer at most: a `slow-swap` victim keeps its own (its links go on).
  const workers = options.pool.live().filter((w) => w.readyAt !== null && !tracedBy.has(w));
  const threads = threadsOf(workers);
  if (threads.length === 0) {
    return void options.events.record("chaos-skip", { action: "fence-disk", why: "no worker to act on" });
  }
  for (const w of workers) tracedBy.set(w, "fence-disk");
  try {
    const tracer = await startTracer(threads, ["-e", "trace=link,linkat", "-e", "inject=link,linkat:error=ENOSPC"]);
    if ("error" in tracer) {
      return void options.events.record("chaos-skip", { action: "fence-disk", why: `strace: ${tracer.error}` });
    }
    const refusing = options.events.record("fence-disk", { pids: workers.map((w) => w.pid), ms: Math.round(ms) });
    await sleep(Math.max(0, ms - 300));
    await tracer.stop();
    options.events.record("fence-disk-end", { since: refusing.t });
  } finally {
    for (const w of workers) if (tracedBy.get(w) === "fence-disk") tracedBy.delete(w);
  }
}

/** Workers strace is attached to now, and by which action (a thread can have one tracer only). */
const tracedBy = new Map<SoakWorker, "fence-disk" | "slow-swap">();
/**
 * Claims (labels) a `slow-swap` waits on a newer publish of: other actions leave their holders
 * alone meanwhile (no kill, pause, deploy or force release of them), or that publish may not come.
 */
const slowSwapClaims = new Set<string>();

/**
 * Left out of kills, pauses and deploys: a `slow-swap` victim (its pause and resume are that
 * action's) and a worker running a run of a claim a `slow-swap` waits on.
 */
function spared(worker: SoakWorker, running: RunRecord[]): boolean {
  return (
    tracedBy.get(worker) === "slow-swap" ||
    running.some((r) => r.workerId === worker.id && slowSwapClaims.has(claimLabel(r)))
  );
}

/** The thread ids of `workers` (one `-p` each: strace attaches to threads, not processes). */
function threadsOf(workers: SoakWorker[]): string[] {
  return workers.flatMap((w) => {
    try {
      return fs.readdirSync(`/proc/${w.pid}/task`);
    } catch {
      return [];
    }
  });
}

/**
 * strace attached to `threads` with `args` (its output to /dev/null); `stop` detaches it (SIGINT:
 * held-back calls go on), SIGKILL if it does not go within 5 s. An error (no strace) is said
 * within 300 ms, as `{ error }`.
 */
async function startTracer(
  threads: string[],
  args: string[],
): Promise<{ stop: () => Promise<void> } | { error: string }> {
  const tracer = spawn("strace", ["-qq", ...threads.flatMap((tid) => ["-p", tid]), ...args, "-o", "/dev/null"], {
    stdio: "ignore",
  });
  const exited = new Promise<void>((resolve) => {
    tracer.once("exit", () => resolve());
    tracer.once("error", () => resolve());
  });
  const failed = await Promise.race([
    new Promise<string>((resolve) => tracer.once("error", (error) => resolve(String(error)))),
    sleep(300).then(() => null),
  ]);
  if (failed !== null) return { error: failed };
  const running = () => tracer.exitCode === null && tracer.signalCode === null;
  return {
    stop: async () => {
      if (running()) tracer.kill("SIGINT");
      await Promise.race([exited, sleep(5_000)]);
      if (running()) tracer.kill("SIGKILL");
    },
  };
}

/** How long a `slow-swap` victim is watched for a publish that enters its held-back swap. */
const SLOW_SWAP_FIND_MS = 8_000;
/** `current` behind the victim's own pointer this long: it is inside its held-back symlink. */
const SLOW_SWAP_LAG_MS = 200;
/** How long the victim stays paused waiting for a newer fence's publish. */
const SLOW_SWAP_HOLD_MS = 15_000;
/**
 * The longest, when a newer holder of the claim is under way at the end of SLOW_SWAP_HOLD_MS (on a
 * loaded CI machine the next version often had not published within 15 s: no rollback to see).
 */
const SLOW_SWAP_HOLD_MAX_MS = 30_000;
/**
 * After the newer fence's pointer: how long the victim stays paused, for its publisher to record
 * and (when nothing holds it off) swap, and for the watcher (50 ms) to see that swap.
 */
const SLOW_SWAP_NEWER_SWAP_MS = 500;

/**
 * `slow-swap` (see the header): one busy worker's symlinks held back `delayMs` by strace; once one
 * of its publishes is inside its swap, the worker is paused, its claim force-released and the
 * next version asked for; it goes on once a newer fence published (and swapped, when nothing
 * excludes it). Background action: ends after the victim's swap did, or said why it could not.
 */
async function slowSwap(options: ChaosOptions, delayMs: number): Promise<void> {
  const { events, pool } = options;
  const skip = (why: string) => void events.record("chaos-skip", { action: "slow-swap", why });
  const definitions = options.definitions;
  if (!definitions) return skip("no definitions given (where each output's current is)");
  // The worker nearest to a publish: its run of a rebuild that is not hashed furthest along (its
  // progress), looked for every 50 ms for up to 4 s (early in a soak no run may be under way yet).
  let victim: SoakWorker | null | undefined;
  const lookUntil = Date.now() + 4_000;
  while (!victim && Date.now() < lookUntil) {
    if (victim === null) await sleep(50);
    const running = await runningRuns(options.main, options.keys).catch(() => [] as RunRecord[]);
    victim =
      pool
        .live()
        .filter((w) => w.readyAt !== null && !w.paused && !tracedBy.has(w) && !spared(w, running))
        .map((worker) => ({
          worker,
          progress: Math.max(
            -1,
            ...running
              .filter((r) => r.workerId === worker.id && !HASHED_REBUILDS.has(r.rebuild))
              .map((r) => r.progress ?? 0),
          ),
        }))
        .filter((c) => c.progress >= 0)
        .sort((a, b) => b.progress - a.progress)[0]?.worker ?? null;
  }
  if (!victim) return skip("no worker running a job (or every busy one traced already)");
  tracedBy.set(victim, "slow-swap");
  try {
    const tracer = await startTracer(threadsOf([victim]), [
      "-e",
      "trace=symlink,symlinkat",
      "-e",
      `inject=symlink,symlinkat:delay_enter=${Math.round(delayMs * 1_000)}`,
    ]);
    if ("error" in tracer) return skip(`strace: ${tracer.error}`);
    const traced = events.record("slow-swap-traced", {
      pid: victim.pid,
      workerId: victim.id,
      delayMs: Math.round(delayMs),
    });
    let end: Record<string, unknown> | null = null;
    try {
      end = await holdUpInsideSwap(options, definitions, victim, delayMs, traced.t);
    } finally {
      // The victim's swap (and its follow of the newer record) ended, or the window did.
      await tracer.stop();
    }
    if (end) events.record("slow-swap-end", end);
  } finally {
    if (victim.paused) resume(pool, events, victim);
    tracedBy.delete(victim);
  }
}

/** Whether some process holds `outputDir`'s swap lock (`flock -n` cannot take it); true without `flock`. */
function currentLockHeld(outputDir: string): boolean {
  const probe = spawnSync("flock", ["-n", path.join(outputDir, CURRENT_LOCK_FILE), "true"], { timeout: 1_000 });
  return probe.error ? true : probe.status === 1;
}

/** A claim of the victim whose publish is inside its swap: `current` lags behind its pointer. */
interface InsideSwap {
  claim: ClaimInfo;
  fence: number;
  build: string;
  outputDir: string;
  /** What `current` named meanwhile (the build before). */
  current: string | null;
}

async function holdUpInsideSwap(
  options: ChaosOptions,
  definitions: Definitions,
  victim: SoakWorker,
  delayMs: number,
  tracedAt: number,
): Promise<Record<string, unknown> | null> {
  const { events } = options;
  const skip = (why: string) => {
    events.record("chaos-skip", { action: "slow-swap", why, pid: victim.pid });
    return null;
  };
  const gone = () => victim.exitedAt !== null || victim.leaving;
  // 1. A publish of the victim inside its held-back swap.
  const lagSince = new Map<string, number>();
  let inside: InsideSwap | null = null;
  const lookUntil = Math.min(Date.now() + SLOW_SWAP_FIND_MS, options.until);
  while (!inside && Date.now() < lookUntil && !gone()) {
    const held = await withTimeout(listClaims(options.claims, options.keys), 1_000, "claims").catch(() => null);
    for (const claim of held?.claims ?? []) {
      const { holder } = claim;
      const definition = holder.rebuild ? definitions.rebuilds.get(holder.rebuild) : undefined;
      if (holder.workerId !== victim.id || !holder.runId || !definition || claim.revoked !== null) continue;
      // Not a hashed rebuild's: its version comes from its input, so the next run may build the
      // same bytes (no rollback to see), and its runs are the longest.
      if (holder.version === PRUNING_VERSION || claim.fence === null || HASHED_REBUILDS.has(holder.rebuild!)) continue;
      const published = await withTimeout(
        readPublished(options.claims, options.keys, claim.name),
        1_000,
        "pointer",
      ).catch(() => null);
      if (published?.runId !== holder.runId || published.fence !== claim.fence) continue;
      const outputDir = outputDirOf(definition, holder.tenant ?? undefined);
      const current = await readCurrent(outputDir);
      const key = `${claim.name} ${claim.fence}`;
      if (current === published.value) {
        lagSince.delete(key);
        continue;
      }
      // Its run listed already: the held-back symlink it is in is its swap's, not its listing's.
      const link = path.join(outputDir, publishedRunLinkName(claim.fence, holder.runId));
      if (!fs.lstatSync(link, { throwIfNoEntry: false })) continue;
      // And it holds `current`'s lock: it is inside its swap, not held up before it (a CI run saw
      // victims paused short of their swap: repair swapped for them, and no newer fence came).
      if (!currentLockHeld(outputDir)) {
        lagSince.delete(key);
        continue;
      }
      const since = lagSince.get(key) ?? Date.now();
      lagSince.set(key, since);
      if (Date.now() - since >= SLOW_SWAP_LAG_MS) {
        inside = { claim, fence: claim.fence, build: published.value, outputDir, current };
        break;
      }
    }
    if (!inside) await sleep(25);
  }
  if (!inside) {
    return skip(
      gone()
        ? "the victim left (killed or deployed) before it swapped"
        : `no publish of the victim entered its swap within ${Math.round((Date.now() - tracedAt) / 1_000)} s`,
    );
  }
  // 2. Paused inside its swap (so it also takes no job meanwhile), its claim force-released and
  // the next version asked for, as forceReleaseOne does.
  const { claim } = inside;
  const ref = { rebuild: claim.holder.rebuild!, tenant: claim.holder.tenant ?? undefined };
  slowSwapClaims.add(claimLabel(ref));
  try {
    return await holdUntilNewer(options, victim, delayMs, tracedAt, inside, ref);
  } finally {
    slowSwapClaims.delete(claimLabel(ref));
  }
}

/** Steps 2–4 of `holdUpInsideSwap`: the victim inside its swap of `inside`'s output. */
async function holdUntilNewer(
  options: ChaosOptions,
  victim: SoakWorker,
  delayMs: number,
  tracedAt: number,
  inside: InsideSwap,
  ref: SoakClaimRef,
): Promise<Record<string, unknown>> {
  const { events, pool } = options;
  const { claim } = inside;
  const gone = () => victim.exitedAt !== null || victim.leaving;
  // Stopped first: its held-back symlink ends 1.3–1.8 s after it was seen inside it.
  victim.paused = true;
  pool.signal(victim, "SIGSTOP");
  const running = await runningRuns(options.main, options.keys).catch(() => [] as RunRecord[]);
  const jobs = running
    .filter((r) => r.workerId === victim.id)
    .map((r) => ({ jobId: r.jobId, attempt: r.attempt, runId: r.id }));
  const pause = events.record("pause", {
    pid: victim.pid,
    workerId: victim.id,
    // As planned; held on for a newer holder it lasts longer (its `resume` says when it ended).
    ms: SLOW_SWAP_HOLD_MS + SLOW_SWAP_NEWER_SWAP_MS,
    jobs,
    during: "slow-swap",
  });
  const released = await releaseAsOperator(
    options,
    claim,
    "soak: slow-swap: operator force release of a claim whose holder is inside its swap of current",
  ).catch((error: unknown) => ({ status: `error: ${String(error)}` }) as const);
  const started = events.record("slow-swap", {
    pid: victim.pid,
    workerId: victim.id,
    claim: claimLabel(ref),
    name: claim.name,
    fence: inside.fence,
    runId: claim.holder.runId,
    build: inside.build,
    current: inside.current,
    delayMs: Math.round(delayMs),
    insideSwapAfterMs: pause.t - tracedAt,
    status: released.status,
  });
  if (released.status === "released") {
    await options
      .newVersion?.(ref, "slow-swap")
      .catch((error: unknown) => events.record("chaos-error", { action: "slow-swap", error: String(error) }));
  }
  // 3. Paused until a newer fence of that claim is published and, unless a lock holds it off,
  // swapped; `current` sampled meanwhile and after (every change: the evidence of a rollback).
  const seen: string[] = [];
  let last: string | null | undefined;
  const look = async () => {
    const now = await readCurrent(inside.outputDir);
    if (now !== last) seen.push(`${now === null ? "none" : now.slice(0, 8)}@${Date.now() - started.t}`);
    last = now;
    return now;
  };
  let newer: { fence: number; build: string; runId: string | null } | null = null;
  let newerSeenAt = 0;
  let holdUntil = started.t + SLOW_SWAP_HOLD_MS;
  let heldLonger = false;
  while (!gone()) {
    if (Date.now() >= holdUntil) {
      // A newer holder under way (its fence past the victim's): held on for its publish.
      const holder = heldLonger
        ? null
        : await withTimeout(readClaim(options.claims, options.keys, claim.name), 1_000, "claim").catch(() => null);
      if (newer || !holder || holder.fence === null || holder.fence <= inside.fence) break;
      heldLonger = true;
      holdUntil = started.t + SLOW_SWAP_HOLD_MAX_MS;
      continue;
    }
    await look();
    if (!newer) {
      const pointer = await withTimeout(
        readPublished(options.claims, options.keys, claim.name),
        1_000,
        "pointer",
      ).catch(() => null);
      // A newer fence with other bytes (one that reproduced this build cannot show a rollback).
      if (pointer && pointer.fence > inside.fence && pointer.value !== inside.build) {
        newer = { fence: pointer.fence, build: pointer.value, runId: pointer.runId };
        newerSeenAt = Date.now();
        // Seen late in the hold: still paused long enough for its swap to be made and seen.
        holdUntil = Math.max(holdUntil, newerSeenAt + SLOW_SWAP_NEWER_SWAP_MS);
      }
    }
    if (newer && Date.now() - newerSeenAt >= SLOW_SWAP_NEWER_SWAP_MS) break;
    await sleep(10);
  }
  const pausedMs = Date.now() - pause.t;
  resume(pool, events, victim);
  // 4. The rest of its held-back symlink, its rename, its re-read of the record and its held-back
  // follow of a newer one: traced for twice the delay at least, until its run ended (at most 2 s
  // more; another worker may have closed its record while it was paused), `current` sampled.
  // `current` samples from the first pointer past the newer fence on are a later publish's (one
  // may reproduce the victim's bytes), not the victim's swap: `wentBack` looks before them.
  const resumedAt = Date.now();
  let runEnded = false;
  let overtakenAt = -1;
  while (Date.now() < resumedAt + 2 * delayMs + 2_000 && !gone()) {
    await look();
    if (overtakenAt < 0 && newer) {
      const pointer = await withTimeout(
        readPublished(options.claims, options.keys, claim.name),
        1_000,
        "pointer",
      ).catch(() => null);
      if (pointer && pointer.fence > newer.fence) overtakenAt = seen.length;
    }
    if (!runEnded) {
      const record = await withTimeout(readRun(options.main, options.keys, claim.holder.runId!), 1_000, "run").catch(
        () => null,
      );
      runEnded = record !== null && record.status !== "running";
    }
    if (runEnded && Date.now() >= resumedAt + 2 * delayMs + 300) break;
    await sleep(10);
  }
  await look();
  const newerRun = newer?.runId
    ? await withTimeout(readRun(options.main, options.keys, newer.runId), 1_000, "run").catch(() => null)
    : null;
  const newerAt = newer ? seen.findIndex((s) => s.startsWith(newer.build.slice(0, 8))) : -1;
  const ownSwaps = seen.slice(newerAt, overtakenAt < 0 ? undefined : overtakenAt);
  return {
    since: started.t,
    pid: victim.pid,
    claim: claimLabel(ref),
    fence: inside.fence,
    build: inside.build,
    newer: newer && { ...newer, workerId: newerRun?.workerId ?? null },
    pausedMs,
    heldLonger,
    victimRunEnded: runEnded,
    // `current` went to the newer build, then back to the victim's: what the swap lock prevents.
    wentBack: newerAt >= 0 && ownSwaps.some((s) => s.startsWith(inside.build.slice(0, 8))),
    overtakenAtSample: overtakenAt >= 0 ? overtakenAt : null,
    currentSeen: seen,
  };
}

/** The file `disk-full` fills the outputs' disk with (in the outputs' directory). */
export const DISK_FILLER = ".soak-disk-filler";

/**
 * Fills the outputs' filesystem to its last byte and keeps it full for `ms` (topped up every
 * 50 ms: a run that fails frees its work dir's space), then removes the filler.
 */
async function fillDisk(options: ChaosOptions, ms: number): Promise<void> {
  const dir = options.fullableDisk;
  if (!dir) return void options.events.record("chaos-skip", { action: "disk-full", why: "no tmpfs for the outputs" });
  const filler = path.join(dir, DISK_FILLER);
  const full = options.events.record("disk-full", { dir, ms: Math.round(ms) });
  try {
    const fd = fs.openSync(filler, "w");
    try {
      const until = Date.now() + ms;
      fillToLastByte(fd);
      while (Date.now() < until) {
        await sleep(Math.min(50, until - Date.now()));
        fillToLastByte(fd, [64 * 1024, 4096, 1]);
      }
    } finally {
      fs.closeSync(fd);
    }
  } catch (error) {
    options.events.record("chaos-error", { action: "disk-full", error: String(error) });
  } finally {
    fs.rmSync(filler, { force: true });
    options.events.record("disk-full-end", { since: full.t });
  }
}

/** A force release as an operator makes it (the token the Claims page shows), within 2 s. */
function releaseAsOperator(
  options: Pick<ChaosOptions, "claims" | "main" | "keys">,
  claim: { name: string; token: string },
  reason: string,
) {
  return withTimeout(
    forceReleaseClaim({ claims: options.claims, audit: options.main }, options.keys, {
      name: claim.name,
      token: claim.token,
      actor: "soak",
      reason,
    }),
    2_000,
    "force release",
  );
}

/** An operator's force release of a live claim, as the Claims page does it (the token shown). */
async function forceReleaseOne(options: ChaosOptions): Promise<void> {
  const { claims: held } = await withTimeout(listClaims(options.claims, options.keys), 2_000, "claims");
  // The wrong moment is the one to test: a claim whose step is writing now, the one that started
  // last (it has the longest still to write). Else the newest run's claim; a pruner's claim, or
  // one being released, only when nothing else is held.
  const writing = options.journalDir ? writingRuns(options.journalDir) : new Map<string, number>();
  const running = held
    .filter((c) => c.holder.runId !== null && c.revoked === null)
    .filter((c) => !c.holder.rebuild || !slowSwapClaims.has(claimLabel({ ...c.holder, rebuild: c.holder.rebuild })))
    .map((c) => ({ c, since: writing.get(c.holder.runId!) ?? -1 }))
    .sort((a, b) => b.since - a.since || (b.c.holder.acquiredAt ?? 0) - (a.c.holder.acquiredAt ?? 0))
    .map(({ c }) => c);
  const claims = running.length > 0 ? running : held;
  if (claims.length === 0)
    return void options.events.record("chaos-skip", { action: "force-release", why: "no claim held" });
  const claim = running[0] ?? claims[Math.floor(options.random() * claims.length)]!;
  const result = await releaseAsOperator(options, claim, "soak: operator force release of a live claim");
  options.events.record("force-release", {
    claim: claim.name,
    fence: claim.fence,
    runId: claim.holder.runId,
    version: claim.holder.version,
    status: result.status,
  });
  // The wrong moment made worse: the operator asks for the newest version right away, so a
  // new run waits for this claim while its old holder may still be writing.
  if (result.status === "released" && claim.holder.rebuild && claim.holder.version !== PRUNING_VERSION) {
    await options.newVersion?.(
      { rebuild: claim.holder.rebuild, tenant: claim.holder.tenant ?? undefined },
      "force-release",
    );
  }
}

/** Runs whose step has started and not yet ended, per the journals: run id → its start (ms). */
function writingRuns(journalDir: string): Map<string, number> {
  const started = new Map<string, number>();
  for (const file of fs.readdirSync(journalDir)) {
    if (!file.endsWith(".journal")) continue;
    for (const line of fs.readFileSync(path.join(journalDir, file), "utf8").split("\n")) {
      const [time, kind, runId] = line.split(" ");
      if (!runId) continue;
      if (kind === "start") started.set(runId, Number(time));
      else if (kind === "end" || kind === "term" || kind === "enospc" || kind?.startsWith("stdout-"))
        started.delete(runId);
    }
  }
  return started;
}

function resume(pool: WorkerPool, events: EventLog, worker: SoakWorker): void {
  if (!worker.paused) return;
  worker.paused = false;
  pool.signal(worker, "SIGCONT");
  events.record("resume", { pid: worker.pid, workerId: worker.id });
}

async function startReplacement(pool: WorkerPool, events: EventLog): Promise<void> {
  try {
    await pool.start();
  } catch (error) {
    events.record("worker-start-failed", { error: String(error) });
  }
}

/** A ready, running, unpaused worker; one that runs a job (per the run records) if there is one. */
async function chooseVictim(
  options: ChaosOptions,
  kind: ChaosKind,
): Promise<{ worker: SoakWorker; running: RunRecord[] } | null> {
  const running = await runningRuns(options.main, options.keys).catch(() => [] as RunRecord[]);
  const candidates = options.pool.live().filter((w) => w.readyAt !== null && !w.paused && !spared(w, running));
  if (candidates.length === 0) return null;
  const busy = candidates.filter((w) => running.some((r) => r.workerId === w.id));
  // The pause past the job lock tries the warden: a worker running archive (the longest steps,
  // up to 3.2 s) may still have a step writing past the warden's 3 s limit.
  const long =
    kind === "pause-past-lock"
      ? busy.filter((w) => running.some((r) => r.workerId === w.id && r.rebuild === "archive"))
      : [];
  const pool = long.length > 0 ? long : busy.length > 0 ? busy : candidates;
  const worker = pool[Math.floor(options.random() * pool.length)]!;
  return { worker, running: running.filter((r) => r.workerId === worker.id) };
}

/**
 * A ready, unpaused worker reading a hashed rebuild's inputs now (its record running without a
 * version), looked for every 20 ms for up to `withinMs`; null if none was seen.
 */
async function readingVictim(
  options: ChaosOptions,
  withinMs: number,
): Promise<{ worker: SoakWorker; running: RunRecord[] } | null> {
  const deadline = Math.min(Date.now() + withinMs, options.until);
  while (Date.now() < deadline) {
    const running = await runningRuns(options.main, options.keys).catch(() => [] as RunRecord[]);
    const reading = running.filter((r) => r.version === null && HASHED_REBUILDS.has(r.rebuild));
    const worker = options.pool
      .live()
      .find((w) => w.readyAt !== null && !w.paused && !spared(w, running) && reading.some((r) => r.workerId === w.id));
    if (worker) return { worker, running: running.filter((r) => r.workerId === worker.id) };
    await sleep(20);
  }
  return null;
}

export async function runningRuns(main: Redis, keys: RedisKeys): Promise<RunRecord[]> {
  const ids = await withTimeout(main.zrange(keys.runIndex({ status: "running" }), "0", "-1"), 1_500, "running runs");
  const runs = await withTimeout(Promise.all(ids.map((id) => readRun(main, keys, id))), 1_500, "running run records");
  return runs.filter((r): r is RunRecord => r !== null && r.status === "running");
}

/**
 * When BullMQ hands a killed worker's job to a worker again (its `processedOn` moves past the
 * kill): the stall-detection part of kill→resume, before any deferral behind another holder.
 * Event `redelivered` {jobId, ms}, or `not-redelivered` {jobId, state, failedReason}.
 */
async function watchRedelivery(
  options: Pick<ChaosOptions, "queue" | "events">,
  jobId: string,
  killedAt: number,
): Promise<void> {
  // The job's own times (processedOn, finishedOn) come from the clock of the worker that wrote
  // them, which may be skewed (--clock-skews): what changed is judged by its counters, and when,
  // by this process's clock (to the 200 ms of a look).
  let before: { started: number; finishedOn: number } | null = null;
  const deadline = killedAt + 90_000;
  for (let look = 0; Date.now() < deadline; look++) {
    if (look > 0) await sleep(200);
    try {
      const job = await withTimeout(options.queue.getJob(jobId), 2_000, "getJob");
      if (!job) return void options.events.record("not-redelivered", { jobId, state: "removed" });
      const now = { started: job.attemptsStarted, finishedOn: job.finishedOn ?? 0 };
      if (!before) {
        before = now;
        continue;
      }
      if (now.started > before.started) {
        return void options.events.record("redelivered", { jobId, ms: Date.now() - killedAt });
      }
      if (now.finishedOn !== before.finishedOn) {
        const state = await options.queue.getJobState(jobId);
        return void options.events.record("not-redelivered", { jobId, state, failedReason: job.failedReason ?? null });
      }
    } catch {
      // Redis restarting: look again
    }
  }
  options.events.record("not-redelivered", { jobId, state: "still waiting after 90 s" });
}
