/**
 * Run `fn` under a claim: acquire, keep it refreshed, abort `fn`'s signal on loss, release in
 * `finally`. Not acquiring is an expected outcome (`held`: `fn` is not called; count it as a
 * skip), not an error.
 */
import { claimEvents } from "../events/claim-events";
import type { RedisKeys } from "../redis/keys";
import type { ScriptingClient } from "../redis/scripts";
import { acquireClaim } from "./acquire";
import { ClaimLostError } from "./errors";
import { ClaimKeeper, type ClaimKeeperEvent, type HeldClaim } from "./keeper";
import { releaseClaim } from "./release";
import { assertClaimTiming } from "./timing";
import type { AcquireResult, ClaimMetadata, ClaimTiming, ReleaseResult } from "./types";

export interface WithClaimOptions extends ClaimTiming {
  /**
   * Longest wait for the release in `finally` (default: min(ttlMs, 5 s)). A release still
   * queued after it is harmless: it is owner-checked, and the claim expires on its own.
   */
  releaseTimeoutMs?: number;
  /** See `AcquireOptions.fenceFloor`. */
  fenceFloor?: number;
  /** Events that do not change the outcome (transient refresh errors, release problems). */
  onEvent?: (event: WithClaimEvent) => void;
}

export type WithClaimEvent = ClaimKeeperEvent | { type: "release-failed"; outcome: ReleaseOutcome };

export type ReleaseOutcome = ReleaseResult | { status: "error"; error: unknown } | { status: "timeout" };

export type WithClaimResult<T> =
  | Extract<AcquireResult, { status: "held" }>
  | {
      status: "done";
      value: T;
      token: string;
      fence: number;
      tookOverFrom: { token: string; fence: number | null } | null;
      /**
       * Set when the claim was lost while `fn` ran but `fn` finished anyway (it ignored its
       * signal): the value was produced without exclusivity; only a fenced publish is safe.
       */
      claimLost: ClaimLostError | null;
      release: ReleaseOutcome;
    };

/**
 * Throws (rejects) on invalid timing (`refreshEveryMs > ttlMs / 2`). When `fn` throws after
 * the claim was lost, the `ClaimLostError` is thrown instead of `fn`'s error (usually the
 * AbortError it caused). Release problems are reported, never thrown over `fn`'s outcome.
 */
export async function withClaim<T>(
  client: ScriptingClient,
  keys: RedisKeys,
  name: string,
  meta: ClaimMetadata,
  fn: (claim: HeldClaim) => Promise<T> | T,
  options: WithClaimOptions,
): Promise<WithClaimResult<T>> {
  const timing = { ttlMs: options.ttlMs, refreshEveryMs: options.refreshEveryMs };
  assertClaimTiming(timing);
  const onEvent = options.onEvent ?? (() => {});

  const sentAt = performance.now();
  // Live events for the dashboard (lib/events): the grant, each refresh and the release write
  // theirs in their own scripts; a loss is sent on its own (fire-and-forget).
  const grant = await acquireClaim(client, keys, name, meta, timing, {
    ...(options.fenceFloor ? { fenceFloor: options.fenceFloor } : {}),
    liveEvent: true,
  });
  if (grant.status === "held") return grant;
  const events = claimEvents(client, keys, name, grant.token);

  const keeper = new ClaimKeeper({
    client,
    keys,
    name,
    token: grant.token,
    fence: grant.fence,
    tookOverFrom: grant.tookOverFrom,
    timing,
    grantSentAt: sentAt,
    liveEvents: true,
    onEvent: (event) => {
      if (event.type === "lost") events.lost(event.error.cause);
      onEvent(event);
    },
  });
  keeper.start();
  let outcome: { ok: true; value: T } | { ok: false; error: unknown };
  try {
    keeper.throwIfLost(); // the acquire itself took longer than the TTL
    outcome = { ok: true, value: await fn(keeper) };
  } catch (error) {
    outcome = { ok: false, error };
  } finally {
    keeper.stop();
  }
  const release = await releaseWithin(
    client,
    keys,
    name,
    grant.token,
    options.releaseTimeoutMs ?? Math.min(timing.ttlMs, 5_000),
  );
  // A release (or the acknowledgement of a force release) wrote its `claim.released` event.
  if (release.status !== "released" && release.status !== "acknowledged") {
    try {
      onEvent({ type: "release-failed", outcome: release });
    } catch {
      // ignored: events are informational
    }
  }

  const lost = keeper.lostError ?? null;
  // `fn`'s own account of the loss (it may say more of why: a stall the step warden saw) wins.
  if (!outcome.ok) throw lost && !(outcome.error instanceof ClaimLostError) ? lost : outcome.error;
  return {
    status: "done",
    value: outcome.value,
    token: grant.token,
    fence: grant.fence,
    tookOverFrom: grant.tookOverFrom,
    claimLost: lost,
    release,
  };
}

async function releaseWithin(
  client: ScriptingClient,
  keys: RedisKeys,
  name: string,
  token: string,
  timeoutMs: number,
): Promise<ReleaseOutcome> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<ReleaseOutcome>((resolve) => {
    timer = setTimeout(() => resolve({ status: "timeout" }), timeoutMs);
  });
  try {
    return await Promise.race([
      releaseClaim(client, keys, name, token, { liveEvent: true }).catch((error: unknown): ReleaseOutcome => ({
        status: "error",
        error,
      })),
      timeout,
    ]);
  } finally {
    clearTimeout(timer);
  }
}
