/**
 * The health report behind `GET /api/health` and the banner. Bounded in time: an unreachable or
 * frozen Redis yields `ok:false` within `HEALTH_DEADLINE_MS`, never a hang.
 */
import type { Redis } from "ioredis";
import type { RedisKeys } from "../redis/keys";
import { formatDurationMs } from "../ui/format";
import { countWorkers, type SilentWorker } from "../workers/heartbeat";
import { readWorkerRefusal, refusalProblem } from "../workers/refusal";
import { inspectRedis, safetyProblems, type RedisSafety } from "./redis-safety";

export const HEALTH_DEADLINE_MS = 1_800;

export interface HealthReport {
  /** Both Redis servers answered. Eviction or persistence problems are in `problems`. */
  ok: boolean;
  redis: RedisSafety;
  claimsRedis: RedisSafety;
  /** Workers with a live heartbeat; null when the main Redis did not answer. */
  workers: number | null;
  /** Human-readable reasons for a red banner, most severe first. */
  problems: string[];
  /** Alerts firing now (lib/alerts); absent for anonymous callers or when not read. */
  alertsFiring?: number;
  /**
   * When the probes behind this report were sent (this server's clock, ms): of two reports the
   * page holds the later one, so a probe sent while Redis hung cannot overwrite a newer verdict.
   */
  checkedAt?: number;
}

export interface HealthProbes {
  main: Pick<Redis, "pipeline" | "zcount">;
  claims: Pick<Redis, "pipeline">;
  keys: RedisKeys;
}

function timeout<T>(ms: number, value: T): Promise<T> {
  return new Promise((resolve) => setTimeout(resolve, ms, value).unref?.());
}

async function bounded<T>(work: Promise<T>, fallback: T, ms: number): Promise<T> {
  return Promise.race([work.catch(() => fallback), timeout(ms, fallback)]);
}

export async function checkHealth(probes: HealthProbes, deadlineMs = HEALTH_DEADLINE_MS): Promise<HealthReport> {
  const checkedAt = Date.now();
  const late: RedisSafety = { ok: false, error: `no answer within ${deadlineMs} ms` };
  const [redis, claimsRedis, workers, refusal] = await Promise.all([
    bounded(inspectRedis(probes.main), late, deadlineMs),
    bounded(inspectRedis(probes.claims), late, deadlineMs),
    bounded<Awaited<ReturnType<typeof countWorkers>> | null>(countWorkers(probes.main, probes.keys), null, deadlineMs),
    bounded(readWorkerRefusal(probes.main, probes.keys), null, deadlineMs),
  ]);
  const problems = [...safetyProblems("Redis", redis), ...safetyProblems("Claims Redis", claimsRedis)];
  const ok = redis.ok && claimsRedis.ok;
  // A start that refused its file first: it is why no worker runs, whatever the silent ones tell.
  if (ok && refusal) problems.push(refusalProblem(refusal));
  if (ok && workers?.live === 0) problems.push(noWorkerProblem(workers.silent, workers.serverTime));
  return { ok, redis, claimsRedis, workers: workers?.live ?? null, problems, checkedAt };
}

/** No live worker; what the silent ones of the last hour tell (paused, killed, cut off). `now`: Redis clock. */
function noWorkerProblem(silent: SilentWorker[], now: number): string {
  const base = "No worker is running: rebuilds will wait in the queue";
  const last = silent[0];
  if (!last) return base;
  const more = silent.length > 1 ? ` (and ${silent.length - 1} more)` : "";
  return `${base}. Worker ${last.id}${more} stopped beating ${formatDurationMs(Math.max(0, now - last.lastBeatAt))} ago without shutting down: paused (SIGSTOP, a frozen container), killed or cut off from Redis (see Workers)`;
}

/** An unconfigured process reports like an unreachable Redis, with the reason. */
export function unconfiguredHealth(reason: string): HealthReport {
  const down: RedisSafety = { ok: false, error: reason };
  return { ok: false, redis: down, claimsRedis: down, workers: null, problems: [reason], checkedAt: Date.now() };
}

/** A Redis server as an anonymous caller sees it: up, or "unreachable" (no version, settings or error). */
export type PublicRedisState = { ok: true } | { ok: false; error: "unreachable" };

/** The report for anonymous callers (`GET /api/health` without a login). */
export interface PublicHealthReport extends Omit<HealthReport, "redis" | "claimsRedis" | "alertsFiring"> {
  redis: PublicRedisState;
  claimsRedis: PublicRedisState;
}

/**
 * The report for anonymous callers: the verdict, each Redis up or unreachable, live workers and
 * how many problems — no hosts, paths, errors, problem texts, nor the servers' versions and
 * settings (what an attacker would look up), which need a login.
 */
export function publicHealth(report: HealthReport): PublicHealthReport {
  const redact = (safety: RedisSafety): PublicRedisState =>
    safety.ok ? { ok: true } : { ok: false, error: "unreachable" };
  return {
    ok: report.ok,
    redis: redact(report.redis),
    claimsRedis: redact(report.claimsRedis),
    workers: report.workers,
    problems: report.problems.length ? [`${report.problems.length} problem(s); log in to see them`] : [],
    ...(report.checkedAt === undefined ? {} : { checkedAt: report.checkedAt }),
  };
}
