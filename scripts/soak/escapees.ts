/**
 * The soak's sampler of escaped step processes: every SAMPLE_MS it reads /proc for processes
 * carrying this soak's key prefix and a CLAIMWATCH_RUN_ID in their environment (steps and
 * whatever they started; workers carry no run id), and asks Redis and the worker pool whether
 * that run has ended. A process of a run that ended is an escapee, recorded once per PID as an
 * `escaped` event (the checker counts them). A run has ended when
 *   - the worker that ran it exited more than GRACE_MS ago (its steps must die with it), or
 *   - its record is final, written more than killGrace + GRACE_MS ago, by a worker that was never
 *     paused since the run started (a briefly SIGSTOPped holder's step lives on until SIGCONT,
 *     and another attempt may have written its record meanwhile), or
 *   - its worker has been SIGSTOPped for longer than the step warden's limit (+ GRACE_MS): the
 *     job lock may run out after it, so the warden must have ended the stopped worker's steps.
 */
import fs from "node:fs";
import type { Redis } from "ioredis";
import type { RedisKeys } from "../../lib/redis/keys";
import { isFinalStatus } from "../../lib/runs/transitions";
import { wardenSilenceFor } from "../../lib/rebuilds/steps/warden";
import { DEFAULT_WORKER_OPTIONS } from "../../worker/rebuild-worker";
import { KILL_GRACE_MS, type EventLog, type WorkerPool } from "./bed";

const SAMPLE_MS = 500;
const GRACE_MS = 1_000;

export class EscapeSampler {
  private timer: NodeJS.Timeout | null = null;
  private sampling: Promise<void> | null = null;
  private readonly reported = new Set<number>();
  samples = 0;

  constructor(
    private readonly main: Redis,
    private readonly keys: RedisKeys,
    private readonly prefix: string,
    private readonly pool: WorkerPool,
    private readonly events: EventLog,
    private readonly pausedAt: () => { pid: number; t: number }[],
  ) {}

  start(): void {
    this.timer = setInterval(() => {
      this.sampling ??= this.sample()
        .catch(() => {}) // Redis restarts: the next sample looks again
        .finally(() => (this.sampling = null));
    }, SAMPLE_MS);
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    await this.sampling;
  }

  get escaped(): number {
    return this.reported.size;
  }

  private async sample(): Promise<void> {
    this.samples += 1;
    const found = stepProcesses(this.prefix);
    if (found.length === 0) return;
    const now = Date.now();
    const runIds = [...new Set(found.map((f) => f.runId))];
    const pipeline = this.main.pipeline();
    for (const id of runIds) pipeline.hmget(this.keys.run(id), "status", "finishedAt", "workerId", "startedAt");
    const replies = (await pipeline.exec()) ?? [];
    const runs = new Map(
      runIds.map((id, i) => {
        const [status, finishedAt, workerId, startedAt] = (replies[i]?.[1] as (string | null)[] | undefined) ?? [];
        return [id, { status, finishedAt: Number(finishedAt ?? NaN), workerId, startedAt: Number(startedAt ?? NaN) }];
      }),
    );
    const pauses = this.pausedAt();
    for (const { pid, runId, cmd } of found) {
      if (this.reported.has(pid)) continue;
      const run = runs.get(runId);
      if (!run) continue;
      const worker = this.pool.byId(run.workerId);
      let why: string | null = null;
      if (worker?.exitedAt && now - worker.exitedAt > GRACE_MS) {
        why = `its worker ${worker.pid} exited ${now - worker.exitedAt} ms ago`;
      } else if (
        run.status &&
        isFinalStatus(run.status) &&
        now - run.finishedAt > KILL_GRACE_MS + GRACE_MS &&
        worker &&
        !worker.paused &&
        !pauses.some((p) => p.pid === worker.pid && p.t >= (Number.isFinite(run.startedAt) ? run.startedAt : 0))
      ) {
        why = `its run is ${run.status} since ${now - run.finishedAt} ms`;
      } else if (worker?.paused && pauses.some((p) => p.pid === worker.pid)) {
        // (A worker marked paused whose `pause` event is not recorded yet — the slow-swap sends
        // SIGSTOP, then reads Redis, then records it — is judged at the next sample: with no pause
        // time it read as stopped for Infinity ms.)
        const since = Math.max(...pauses.filter((p) => p.pid === worker.pid).map((p) => p.t));
        const silence = wardenSilenceFor(DEFAULT_WORKER_OPTIONS.lockDuration);
        if (now - since > silence + GRACE_MS) {
          why = `its worker ${worker.pid} has been SIGSTOPped for ${now - since} ms, past the step warden's ${silence} ms limit`;
        }
      }
      if (why) {
        this.reported.add(pid);
        this.events.record("escaped", { pid, runId, why, cmd: cmd.slice(0, 200) });
      }
    }
  }
}

/** Live processes of this soak's steps: (pid, run id, command line). */
function stepProcesses(prefix: string): { pid: number; runId: string; cmd: string }[] {
  const needle = `\0CLAIMWATCH_KEY_PREFIX=${prefix}\0`;
  const found: { pid: number; runId: string; cmd: string }[] = [];
  for (const entry of fs.readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const environ = `\0${fs.readFileSync(`/proc/${entry}/environ`, "utf8")}`;
      if (!environ.includes(needle)) continue;
      const runId = /\0CLAIMWATCH_RUN_ID=([^\0]+)/.exec(environ)?.[1];
      if (!runId) continue;
      if (fs.readFileSync(`/proc/${entry}/stat`, "utf8").includes(") Z ")) continue;
      const cmd = fs.readFileSync(`/proc/${entry}/cmdline`, "utf8").replaceAll("\0", " ").trim();
      found.push({ pid: Number(entry), runId, cmd });
    } catch {
      // exited while reading
    }
  }
  return found;
}
