/**
 * The claim events `withClaim` and force release publish, built in one place. Claims live in the
 * claims Redis, so their events go to that Redis's stream (the hub reads both).
 */
import os from "node:os";
import type { ClaimMetadata, ClaimTiming } from "../claims/types";
import type { RedisKeys } from "../redis/keys";
import { publishEvent } from "./publish";

const HOST = os.hostname();

/** Publishers bound to one claim (name, token); every call is fire-and-forget and never throws. */
export function claimEvents(client: unknown, keys: RedisKeys, name: string, token: string) {
  return {
    acquired(
      grant: { fence: number; acquiredAt: number; tookOverFrom: { token: string; fence: number | null } | null },
      meta: ClaimMetadata,
      timing: ClaimTiming,
    ): void {
      void publishEvent(client, keys, {
        type: "claim.acquired",
        name,
        token,
        fence: grant.fence,
        acquiredAt: grant.acquiredAt,
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
        tookOverFrom: grant.tookOverFrom,
      });
    },
    refreshed(ttlMs: number): void {
      void publishEvent(client, keys, { type: "claim.refreshed", name, token, ttlMs });
    },
    released(forcedBy: string | null = null): void {
      void publishEvent(client, keys, { type: "claim.released", name, token, forcedBy });
    },
    /** An operator force-released the claim; the name is free when its holder acknowledges, at the latest in `windowMs`. */
    revoked(by: string, windowMs: number): void {
      void publishEvent(client, keys, { type: "claim.revoked", name, token, by, windowMs });
    },
    lost(cause: string): void {
      void publishEvent(client, keys, { type: "claim.lost", name, token, cause });
    },
  };
}
