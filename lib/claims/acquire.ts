/**
 * Acquire: one script, one round trip. `SET NX PX` of a fresh token; on success the fence
 * counter is incremented and the metadata and registry entry are written in the same script,
 * so no reader ever sees a claim without its fence or metadata.
 */
import os from "node:os";
import type { Redis } from "ioredis";
import { acquiredEventHead } from "../events/claim-events";
import { recordTakeover } from "../metrics/counters";
import type { RedisKeys } from "../redis/keys";
import { CLAIM_ACQUIRE, META_FIELDS, runScript, type ScriptingClient } from "../redis/scripts";
import { holderFromFieldList, toNumberOrNull, unexpectedReply, type HolderIdentity } from "./holder";
import { assertValidClaimName } from "./name";
import { assertClaimTiming } from "./timing";
import { newClaimToken } from "./token";
import type { AcquireResult, ClaimMetadata, ClaimTiming } from "./types";
import { REPLY } from "../redis/replies";

const HOST = os.hostname();

export interface AcquireOptions {
  /**
   * The highest fence known to be published for this claim outside Redis (the output's durable
   * record): the grant's fence is above it even if Redis forgot its counter.
   */
  fenceFloor?: number;
  /** Write the `claim.acquired` live event (lib/events) in the acquire script itself. */
  liveEvent?: boolean;
}

export async function acquireClaim(
  /** With `multi`, a takeover is also counted and recorded for the `takeover` alert. */
  client: ScriptingClient & Partial<Pick<Redis, "multi">>,
  keys: RedisKeys,
  name: string,
  meta: ClaimMetadata,
  timing: ClaimTiming,
  options: AcquireOptions = {},
): Promise<AcquireResult> {
  assertValidClaimName(name);
  assertClaimTiming(timing);
  const token = newClaimToken();
  const identity: HolderIdentity = {
    host: HOST,
    pid: process.pid,
    workerId: meta.workerId ?? "",
    runId: meta.runId ?? "",
    ...(meta.attempt !== undefined ? { attempt: meta.attempt } : {}),
    rebuild: meta.rebuild ?? "",
    tenant: meta.tenant ?? "",
    version: meta.version ?? "",
    ...(meta.stopWithinMs ? { stopWithinMs: Math.ceil(meta.stopWithinMs) } : {}),
  };
  const reply = await runScript(
    client,
    CLAIM_ACQUIRE,
    [
      keys.claim(name),
      keys.claimMeta(name),
      keys.claimFence(name),
      keys.claimRegistry,
      keys.claimTrail(name),
      keys.claimsEnded,
      keys.claimRefreshes,
      keys.events,
    ],
    [
      token,
      timing.ttlMs,
      name,
      meta.jobId ?? "",
      timing.refreshEveryMs,
      JSON.stringify(identity),
      options.fenceFloor ?? 0,
      meta.trail === false ? "" : "1",
      options.liveEvent ? acquiredEventHead(name, token, meta, timing) : "",
    ],
  );
  const result = decodeAcquireReply(token, reply);
  if (result.status === "acquired" && result.tookOverFrom && client.multi) {
    // Bookkeeping only: a failed write must not turn a granted claim into an error.
    await recordTakeover(client as Pick<Redis, "multi">, keys, {
      claim: name,
      rebuild: meta.rebuild,
      tenant: meta.tenant,
      fence: result.fence,
      previousFence: result.tookOverFrom.fence,
      jobId: meta.jobId,
    }).catch(() => {});
  }
  return result;
}

function decodeAcquireReply(token: string, reply: unknown): AcquireResult {
  if (!Array.isArray(reply)) throw unexpectedReply("acquire", reply);
  const [code] = reply;
  if (code === REPLY.done || code === REPLY.alsoDone) {
    return {
      status: "acquired",
      token,
      fence: Number(reply[1]),
      acquiredAt: Number(reply[2]),
      tookOverFrom: code === REPLY.alsoDone ? { token: String(reply[3]), fence: toNumberOrNull(reply[4]) } : null,
    };
  }
  if (code === REPLY.no && reply.length === META_FIELDS.length + 2) {
    const holder = holderFromFieldList(reply, 2);
    return { status: "held", holder, version: holder.version, pttlMs: Number(reply[1]), ttlMs: holder.ttlMs };
  }
  throw unexpectedReply("acquire", reply);
}
