/**
 * The claim events, built in one place. Claims live in the claims Redis, so their events go to
 * that Redis's stream (the hub reads both). A grant, a refresh and a release write their event
 * in the claim's own script (CLAIM_ACQUIRE, CLAIM_REFRESH, CLAIM_RELEASE: the change and its
 * event are one atomic write, in the same round trip); they take the JSON built here. A force
 * release's `claim.revoked` and a holder's `claim.lost` are sent on their own.
 */
import os from "node:os";
import type { ClaimMetadata, ClaimTiming } from "../claims/types";
import type { RedisKeys } from "../redis/keys";
import { encodeEvent, publishEvent } from "./publish";
import type { StoredEvent } from "./types";

const HOST = os.hostname();

type AcquiredEvent = Extract<StoredEvent, { type: "claim.acquired" }>;

/**
 * The `claim.acquired` event's JSON without its last three members and closing brace: the
 * acquire script appends `"fence"`, `"acquiredAt"` and `"tookOverFrom"`, which only the grant
 * knows.
 */
export function acquiredEventHead(name: string, token: string, meta: ClaimMetadata, timing: ClaimTiming): string {
  const head: Omit<AcquiredEvent, "fence" | "acquiredAt" | "tookOverFrom"> = {
    type: "claim.acquired",
    name,
    token,
    ttlMs: timing.ttlMs,
    refreshEveryMs: timing.refreshEveryMs,
    rebuild: meta.rebuild ?? null,
    tenant: meta.tenant ?? null,
    version: meta.version ?? null,
    holder: {
      host: HOST,
      pid: process.pid,
      workerId: meta.workerId ?? null,
      jobId: meta.jobId ?? null,
      runId: meta.runId ?? null,
    },
  };
  return JSON.stringify(head).slice(0, -1);
}

/** The `claim.refreshed` event, as the refresh script writes it. */
export function refreshedEvent(name: string, token: string, ttlMs: number): string {
  return encodeEvent({ type: "claim.refreshed", name, token, ttlMs });
}

/** The `claim.released` event of a holder's own release (or acknowledgement), as the release script writes it. */
export function releasedEvent(name: string, token: string): string {
  return encodeEvent({ type: "claim.released", name, token, forcedBy: null });
}

/** Publishers of the events sent on their own, bound to one claim (name, token); fire-and-forget, never throw. */
export function claimEvents(client: unknown, keys: RedisKeys, name: string, token: string) {
  return {
    /** An operator force-released the claim; the name is free when its holder acknowledges, at the latest in `windowMs`. */
    revoked(by: string, windowMs: number): void {
      void publishEvent(client, keys, { type: "claim.revoked", name, token, by, windowMs });
    },
    lost(cause: string): void {
      void publishEvent(client, keys, { type: "claim.lost", name, token, cause });
    },
  };
}
