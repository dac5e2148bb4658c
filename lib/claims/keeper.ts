/**
 * Keeps a granted claim alive while work runs under it, and says when it is lost.
 *
 * - Refreshes every `refreshEveryMs` on independent ticks: a hung refresh never stalls the
 *   next one, and a late reply is still honoured (a success extends, a not-owner aborts).
 * - Local deadline: the time the last *successful* refresh was *sent* plus the TTL, on the
 *   monotonic clock (`performance.now()`). Redis started the TTL no earlier than that send,
 *   so past the deadline another process may hold the claim. A timer aborts at the deadline
 *   even when refreshes hang (Redis unreachable); transient errors before it are ridden out.
 * - After a pause (SIGSTOP, swapping, CPU starvation) timers fire late and I/O callbacks may
 *   run first; `throwIfLost()` checks the deadline synchronously for code about to do
 *   something irreversible. The fenced publish is the guarantee; this is the early stop.
 */
import type { RedisKeys } from "../redis/keys";
import type { ScriptingClient } from "../redis/scripts";
import { ClaimLostError, type ClaimLossCause } from "./errors";
import { refreshClaim } from "./refresh";
import type { ClaimTiming } from "./types";

/** How soon `confirm` asks again after a Redis error. */
const CONFIRM_RETRY_MS = 250;

export type ClaimKeeperEvent =
  | { type: "refreshed"; deadlineInMs: number }
  | { type: "refresh-error"; error: unknown }
  /** Redis refreshed the claim, but a `whenRefreshed` listener failed: the local deadline stays. */
  | { type: "refresh-listener-failed"; error: unknown }
  | { type: "lost"; error: ClaimLostError };

/** What work running under a claim sees. */
export interface HeldClaim {
  readonly name: string;
  readonly token: string;
  readonly fence: number;
  /** The earlier attempt of the same job this grant took the claim over from (null: the name was free). */
  readonly tookOverFrom: { token: string; fence: number | null } | null;
  /** Aborted with a `ClaimLostError` as its reason when the claim is lost. */
  readonly signal: AbortSignal;
  /** Checks the local deadline now (timers lag after a pause); throws the `ClaimLostError` if lost. */
  throwIfLost(): void;
  /** Milliseconds until the local deadline (≤ 0: passed). */
  msUntilDeadline(): number;
  /**
   * An owner-checked refresh now, not on the timer: resolves while the claim is ours; throws the
   * `ClaimLostError` when it is not. Redis errors are ridden out (asked again) until the local
   * deadline or until `signal` aborts (its reason is thrown). For work that must know its grant
   * is still in Redis after it wrote something outside it.
   */
  confirm(signal?: AbortSignal): Promise<void>;
  /**
   * Calls `listener` after each successful refresh (and confirm), before the refresh extends the
   * local deadline: a listener that rejects keeps the deadline where it was. Returns its removal.
   */
  whenRefreshed(listener: () => Promise<void> | void): () => void;
}

export interface ClaimKeeperOptions {
  client: ScriptingClient;
  keys: RedisKeys;
  name: string;
  /** The granted claim: its owner token and fence. */
  token: string;
  fence: number;
  /** See `HeldClaim.tookOverFrom` (default null). */
  tookOverFrom?: { token: string; fence: number | null } | null;
  timing: ClaimTiming;
  /** `performance.now()` just before the acquire was sent. */
  grantSentAt: number;
  /** Each refresh writes the `claim.refreshed` live event (lib/events) in its script. */
  liveEvents?: boolean;
  onEvent?: (event: ClaimKeeperEvent) => void;
}

export class ClaimKeeper implements HeldClaim {
  private readonly controller = new AbortController();
  private deadline: number;
  private refreshTimer: ReturnType<typeof setTimeout> | undefined;
  private deadlineTimer: ReturnType<typeof setTimeout> | undefined;
  private stopped = false;
  private readonly refreshListeners = new Set<() => Promise<void> | void>();
  /** Why the last refresh that reached Redis did not extend the deadline (a listener failed), if it did not. */
  private listenerFailure: string | null = null;

  private readonly client: ScriptingClient;
  private readonly keys: RedisKeys;
  readonly name: string;
  readonly token: string;
  readonly fence: number;
  readonly tookOverFrom: { token: string; fence: number | null } | null;
  private readonly timing: ClaimTiming;
  private readonly liveEvents: boolean;
  private readonly onEvent: (event: ClaimKeeperEvent) => void;

  constructor(options: ClaimKeeperOptions) {
    this.client = options.client;
    this.keys = options.keys;
    this.name = options.name;
    this.token = options.token;
    this.fence = options.fence;
    this.tookOverFrom = options.tookOverFrom ?? null;
    this.timing = options.timing;
    this.liveEvents = options.liveEvents ?? false;
    this.onEvent = options.onEvent ?? (() => {});
    this.deadline = options.grantSentAt + options.timing.ttlMs;
  }

  get signal(): AbortSignal {
    return this.controller.signal;
  }

  /** The loss, once the claim is lost. */
  get lostError(): ClaimLostError | undefined {
    return this.controller.signal.aborted ? (this.controller.signal.reason as ClaimLostError) : undefined;
  }

  start(): void {
    if (this.deadlinePassed()) return;
    this.armDeadline();
    this.scheduleRefresh();
  }

  /** Stops refreshing (before release); the signal stays as it is. */
  stop(): void {
    this.stopped = true;
    clearTimeout(this.refreshTimer);
    clearTimeout(this.deadlineTimer);
  }

  throwIfLost(): void {
    this.deadlinePassed();
    this.controller.signal.throwIfAborted();
  }

  msUntilDeadline(): number {
    return this.deadline - performance.now();
  }

  /** Loses the claim if the deadline passed; true when the claim is lost (for any reason). */
  private deadlinePassed(): boolean {
    if (!this.controller.signal.aborted && performance.now() >= this.deadline) {
      const why = this.listenerFailure;
      this.lose("deadline", why ? `the refreshes reached Redis, but ${why}` : undefined);
    }
    return this.controller.signal.aborted;
  }

  private armDeadline(): void {
    clearTimeout(this.deadlineTimer);
    // Re-checked on firing: a timer is never early in Node, but the deadline may have moved.
    this.deadlineTimer = setTimeout(
      () => {
        if (!this.deadlinePassed() && !this.stopped) this.armDeadline();
      },
      Math.max(0, this.msUntilDeadline()),
    );
  }

  private scheduleRefresh(): void {
    this.refreshTimer = setTimeout(() => this.refreshOnce(), this.timing.refreshEveryMs);
  }

  async confirm(signal?: AbortSignal): Promise<void> {
    for (;;) {
      this.throwIfLost();
      signal?.throwIfAborted();
      const sentAt = performance.now();
      const result = await this.sendRefresh().catch((error: unknown) => {
        if (!this.stopped && !this.controller.signal.aborted) this.emit({ type: "refresh-error", error });
        return null;
      });
      if (result && (await this.applyRefresh(result, sentAt))) {
        this.throwIfLost();
        return;
      }
      // A Redis error, or a listener that failed: asked again until the deadline.
      await new Promise((resolve) =>
        setTimeout(resolve, Math.max(0, Math.min(CONFIRM_RETRY_MS, this.msUntilDeadline()))),
      );
    }
  }

  whenRefreshed(listener: () => Promise<void> | void): () => void {
    this.refreshListeners.add(listener);
    return () => this.refreshListeners.delete(listener);
  }

  private refreshOnce(): void {
    if (this.stopped || this.deadlinePassed()) return;
    const sentAt = performance.now();
    this.scheduleRefresh();
    this.sendRefresh()
      .then((result) => this.applyRefresh(result, sentAt))
      .catch((error: unknown) => {
        if (!this.stopped && !this.controller.signal.aborted) this.emit({ type: "refresh-error", error });
      });
  }

  private sendRefresh(): ReturnType<typeof refreshClaim> {
    return refreshClaim(this.client, this.keys, this.name, this.token, this.timing.ttlMs, {
      liveEvent: this.liveEvents,
    }).catch((error: unknown) => {
      this.listenerFailure = null; // the last refresh did not reach Redis: a listener is not why
      throw error;
    });
  }

  /**
   * A refresh's reply, sent at `sentAt`: a success extends the deadline once every `whenRefreshed`
   * listener has finished (true), not when one failed (false: emitted as
   * `refresh-listener-failed`; the deadline stays, so work that cannot record that it holds the claim stops at it); anything
   * else loses the claim.
   */
  private async applyRefresh(result: Awaited<ReturnType<typeof refreshClaim>>, sentAt: number): Promise<boolean> {
    if (this.stopped || this.controller.signal.aborted) return false;
    if (result.status !== "refreshed") {
      this.lose(
        result.status === "not-owner" ? "superseded" : result.status === "revoked" ? "force-released" : "expired",
      );
      return false;
    }
    if (this.refreshListeners.size > 0) {
      const settled = await Promise.allSettled([...this.refreshListeners].map(async (listener) => listener()));
      const failed = settled.find((outcome) => outcome.status === "rejected");
      if (failed) {
        this.listenerFailure = describeListenerFailure(failed.reason);
        if (!this.stopped && !this.controller.signal.aborted)
          this.emit({ type: "refresh-listener-failed", error: failed.reason });
        return false;
      }
      this.listenerFailure = null;
      if (this.stopped || this.controller.signal.aborted) return false;
    }
    this.deadline = Math.max(this.deadline, sentAt + this.timing.ttlMs);
    // A reply that arrives after a pause may extend to a deadline that already passed.
    if (this.deadlinePassed()) return false;
    this.armDeadline();
    this.emit({ type: "refreshed", deadlineInMs: this.msUntilDeadline() });
    return true;
  }

  private lose(cause: ClaimLossCause, detail?: string): void {
    if (this.controller.signal.aborted) return;
    const error = new ClaimLostError(this.name, cause, this.fence, detail);
    clearTimeout(this.refreshTimer);
    clearTimeout(this.deadlineTimer);
    this.controller.abort(error);
    this.emit({ type: "lost", error });
  }

  /** A reporting hook that throws must not break the keeper (or become an unhandled rejection). */
  private emit(event: ClaimKeeperEvent): void {
    try {
      this.onEvent(event);
    } catch {
      // ignored: events are informational
    }
  }
}

/** A failed refresh listener's error, for a lost claim's reason (the holding mark's write names its file). */
function describeListenerFailure(error: unknown): string {
  return `what each refresh must also do failed: ${error instanceof Error ? error.message : String(error)}`;
}
