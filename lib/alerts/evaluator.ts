/**
 * The alert evaluator. Every worker and dashboard process runs one; exactly one evaluates at a
 * time: the one holding the claim `EVALUATOR_CLAIM` (claimwatch's own claims: SET NX PX + fence).
 * The holder refreshes it every `evaluateEvery`; its TTL is three intervals, so when the holder
 * dies another process takes over within about 3 × `evaluateEvery` + one interval. Each commit is
 * fenced and versioned (lib/alerts/commit): a holder that lost its claim while paused is refused,
 * so a transition is recorded, and handed to the outbox, once.
 */
import type { Redis } from "ioredis";
import { acquireClaim, ClaimKeeper, releaseClaim } from "../claims";
import type { Queue } from "bullmq";
import type { Definitions } from "../rebuilds/definitions";
import { tickingSchedules } from "../rebuilds/schedules";
import type { RedisKeys } from "../redis/keys";
import { describeError } from "../describe-error";
import { receiversOf, type AlertsConfig, type Receiver } from "./config";
import { commitChanges, isEmpty, planChanges, readAlertStateSince, type AlertState } from "./commit";
import { OutboxPump } from "./outbox";
import { EVALUATOR_CLAIM, evaluateRules } from "./rules";
import { readAlertSnapshot, recordExpectedTicks, redisTime } from "./snapshot";
import type { EvaluatorRole } from "./evaluator-claim";

export interface EvaluatorDeps {
  main: Redis;
  claims: Redis;
  keys: RedisKeys;
  definitions: Definitions;
  /** The queue's job schedulers: the schedules as they tick, when the definitions here differ (tickingSchedules). */
  schedulers: Pick<Queue, "getJobSchedulers">;
  config: AlertsConfig;
  /** Dashboard origin for links in alerts. */
  publicOrigin: string;
  /** This process in the claim's metadata: a worker id (heartbeat-checked), or empty. */
  workerId?: string;
  /** Which process this is: stored as the claim holder's `rebuild` field, named on the Claims page. */
  role: EvaluatorRole;
  env?: NodeJS.ProcessEnv;
  log?: (line: string) => void;
}

export interface EvaluationResult {
  status: "committed" | "unchanged" | "fenced-out" | "state-changed" | "not-leading";
  fired: number;
  resolved: number;
  active: number;
}

export class AlertEvaluator {
  private keeper: ClaimKeeper | null = null;
  private timer: ReturnType<typeof setTimeout> | undefined;
  private pumpTimer: ReturnType<typeof setInterval> | undefined;
  private running = false;
  private stopped = false;
  private readonly receivers: Receiver[];
  private readonly pump: OutboxPump;
  private readonly log: (line: string) => void;
  private lastError: string | null = null;
  /** Series → its next scheduled tick (ms): cron is parsed only when a tick comes due. */
  private readonly nextTicks = new Map<string, number>();
  /** The alert state read last; read again only when its stored version moved. */
  private state: AlertState | null = null;

  constructor(private readonly deps: EvaluatorDeps) {
    this.receivers = receiversOf(deps.config);
    this.log = deps.log ?? (() => {});
    this.pump = new OutboxPump(deps.main, deps.keys, this.receivers, deps.config, deps.env ?? process.env, this.log);
  }

  get leading(): boolean {
    return this.keeper !== null && !this.keeper.signal.aborted;
  }

  get fence(): number | null {
    return this.leading ? this.keeper!.fence : null;
  }

  start(): void {
    this.stopped = false;
    const every = this.deps.config.evaluateEvery;
    const loop = async () => {
      await this.tick();
      if (!this.stopped) this.timer = setTimeout(loop, every);
      this.timer?.unref?.();
    };
    void loop();
    // Deliveries have their own clock: a slow evaluation never delays a retry, and vice versa.
    this.pumpTimer = setInterval(
      () => {
        if (this.leading) this.pump.pump(() => this.leading).catch((e: unknown) => this.report(e, "delivery"));
      },
      Math.min(1_000, every),
    );
    this.pumpTimer.unref?.();
  }

  /** Stops evaluating and releases the claim (another process takes over at once). */
  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    clearInterval(this.pumpTimer);
    const keeper = this.keeper;
    this.keeper = null;
    if (keeper && !keeper.signal.aborted) {
      keeper.stop();
      await releaseClaim(this.deps.claims, this.deps.keys, EVALUATOR_CLAIM, keeper.token).catch(() => {});
    }
  }

  /** One cycle: take the claim if free, then evaluate if held. Never throws. */
  async tick(): Promise<EvaluationResult> {
    if (this.running) return { status: "not-leading", fired: 0, resolved: 0, active: 0 };
    this.running = true;
    try {
      if (!this.leading) await this.tryLead();
      if (!this.leading) return { status: "not-leading", fired: 0, resolved: 0, active: 0 };
      const result = await this.evaluate();
      if (this.lastError) this.log("alerts: evaluation works again");
      this.lastError = null;
      return result;
    } catch (error) {
      this.report(error, "evaluation");
      return { status: "not-leading", fired: 0, resolved: 0, active: 0 };
    } finally {
      this.running = false;
    }
  }

  private async tryLead(): Promise<void> {
    const every = this.deps.config.evaluateEvery;
    const timing = { ttlMs: 3 * every, refreshEveryMs: every };
    const sentAt = performance.now();
    const grant = await acquireClaim(
      this.deps.claims,
      this.deps.keys,
      EVALUATOR_CLAIM,
      { workerId: this.deps.workerId ?? "", rebuild: this.deps.role, jobId: "", trail: false },
      timing,
    );
    if (grant.status !== "acquired") return;
    // Stopped while the grant was on its way: nothing would release it (the process exits).
    if (this.stopped) {
      await releaseClaim(this.deps.claims, this.deps.keys, EVALUATOR_CLAIM, grant.token).catch(() => {});
      return;
    }
    const keeper = new ClaimKeeper({
      client: this.deps.claims,
      keys: this.deps.keys,
      name: EVALUATOR_CLAIM,
      token: grant.token,
      fence: grant.fence,
      timing,
      grantSentAt: sentAt,
      onEvent: (event) => {
        if (event.type !== "lost") return;
        this.log(`alerts: lost the evaluator claim (${event.error.message})`);
        // Force-released: evaluation stops at once, and the release acknowledges it so another
        // process can take over without waiting out the release window.
        if (event.error.cause === "force-released") {
          void releaseClaim(this.deps.claims, this.deps.keys, EVALUATOR_CLAIM, grant.token).catch(() => {});
        }
      },
    });
    keeper.start();
    this.keeper = keeper;
    this.log(`alerts: evaluating here (fence ${grant.fence}), ${this.receivers.length} receiver(s)`);
  }

  /** Evaluates once as the holder of the claim. */
  async evaluate(): Promise<EvaluationResult> {
    const keeper = this.keeper;
    if (!keeper || keeper.signal.aborted) return { status: "not-leading", fired: 0, resolved: 0, active: 0 };
    const { main, claims, keys, definitions, config } = this.deps;
    const now = await redisTime(main);
    const { schedules } = await tickingSchedules(this.deps.schedulers, main, keys, definitions);
    await recordExpectedTicks(main, keys, schedules, now, this.nextTicks);
    const state = (this.state = await readAlertStateSince(main, keys, this.state));
    const takeoverWindowMs = config.rules.takeover ? config.rules.takeover.resolveAfter : 0;
    const graceMs = config.rules.scheduleMissed ? config.rules.scheduleMissed.grace : 0;
    // A claim alerts once stale for `for`, and staleness starts no earlier than its last refresh.
    const claimStaleForMs = config.rules.claimStale ? config.rules.claimStale.for : Number.MAX_SAFE_INTEGER;
    const snapshot = await readAlertSnapshot(main, claims, keys, definitions, {
      ticking: new Set(schedules.map((s) => s.schedulerId)),
      takeoverWindowMs,
      graceMs,
      claimStaleForMs,
    });
    const outcome = evaluateRules(snapshot, config, {
      definitions,
      publicOrigin: this.deps.publicOrigin,
      firing: state.firing,
    });
    const changes = planChanges(state, outcome, snapshot.pending, this.receivers, snapshot.now);
    const counts = {
      fired: changes.transitions.filter((t) => t.status === "firing").length,
      resolved: changes.resolve.length,
      active: outcome.active.length,
    };
    if (isEmpty(changes)) return { status: "unchanged", ...counts };
    keeper.throwIfLost();
    const committed = await commitChanges(main, keys, keeper.fence, state.version, changes);
    if (committed.status === "fenced-out") {
      keeper.stop();
      this.keeper = null;
      this.log(`alerts: a newer evaluator (fence ${committed.newestFence}) took over; stepping back`);
      return { status: "fenced-out", fired: 0, resolved: 0, active: 0 };
    }
    if (committed.status === "state-changed") return { status: "state-changed", fired: 0, resolved: 0, active: 0 };
    for (const t of changes.transitions) {
      this.log(`alerts: ${t.status} ${t.alert.id}: ${t.alert.annotations.summary}`);
    }
    // Hand the new deliveries over at once rather than at the next pump tick.
    this.pump.pump(() => this.leading).catch((e: unknown) => this.report(e, "delivery"));
    return { status: "committed", ...counts };
  }

  /** Sends what is due now and waits for it (tests). */
  async deliverNow(): Promise<void> {
    await this.pump.pump(() => this.leading);
    await this.pump.settled();
  }

  private report(error: unknown, what: string): void {
    const message = describeError(error);
    if (message !== this.lastError) this.log(`alerts: ${what} failed (will retry): ${message}`);
    this.lastError = message;
  }
}
