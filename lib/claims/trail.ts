/**
 * The claim trail: what happened to one claim name — acquired, refreshed late, released, expired
 * without release (with its last holder), taken over, force-released (by whom, why), stopped after
 * a force release — and the claims that recently ended. Written by the claim scripts themselves
 * (lib/redis/scripts.ts, TRAIL_LUA) in the same script as the change, so the trail never misses
 * or invents one; bounded (capped streams). Entry ids are the claims server's clock.
 *
 * An expiry has no script of its own: it is written when a script next finds the name free (an
 * acquire, a release that came too late, the Claims page pruning its registry). Until then a
 * reader that finds the trail's newest claim gone says so itself (`derived`).
 */
import type { Redis } from "ioredis";
import type { RedisKeys } from "../redis/keys";
import { ENDED_MAX, TRAIL_MAX } from "../redis/scripts";
import { toNumberOrNull } from "./holder";

export const TRAIL_KINDS = [
  "acquired",
  "refreshed-late",
  "released",
  "force-released",
  "stopped",
  "taken-over",
  "expired",
] as const;
export type TrailKind = (typeof TRAIL_KINDS)[number];

/** The holder as the trail names it (from the identity the claim was acquired with). */
export interface TrailHolder {
  workerId: string | null;
  host: string | null;
  pid: number | null;
  runId: string | null;
  rebuild: string | null;
  tenant: string | null;
  version: string | null;
}

export interface TrailEntry {
  /** Stream id; its time part is the claims server's clock. */
  id: string;
  at: number;
  kind: TrailKind;
  /** Claim name. */
  name: string;
  fence: number | null;
  holder: TrailHolder;
  /** force-released: the operator; taken-over: the new holder's worker. */
  by: string | null;
  /** force-released: the operator's reason; expired after a force release: why. */
  reason: string | null;
  /** acquired: TTL; refreshed-late: the gap since the refresh before; released/stopped: held for; force-released: the release window. */
  ms: number | null;
  /** Not written yet: the reader found the trail's newest claim gone (it expired; nothing has noticed). */
  derived?: true;
}

const RUNNING: ReadonlySet<TrailKind> = new Set(["acquired", "taken-over", "refreshed-late", "force-released"]);

type StreamReply = [string, string[]][];

/** The newest `limit` entries of one claim name's trail, newest first. */
export async function readClaimTrail(
  client: Pick<Redis, "xrevrange" | "exists">,
  keys: RedisKeys,
  name: string,
  limit = TRAIL_MAX,
): Promise<TrailEntry[]> {
  const [raw, exists] = await Promise.all([
    client.xrevrange(keys.claimTrail(name), "+", "-", "COUNT", Math.min(Math.max(1, limit), TRAIL_MAX)),
    client.exists(keys.claim(name)),
  ]);
  const entries = decodeEntries(raw as StreamReply);
  const newest = entries[0];
  if (newest && RUNNING.has(newest.kind) && exists === 0) {
    entries.unshift({
      ...newest,
      id: `${newest.id}-derived`,
      kind: "expired",
      by: null,
      reason: newest.kind === "force-released" ? "its holder never acknowledged the force release" : null,
      ms: null,
      derived: true,
    });
  }
  return entries;
}

/** Claims that ended recently (released, stopped, expired, taken over), newest first. */
export async function readEndedClaims(
  client: Pick<Redis, "xrevrange">,
  keys: RedisKeys,
  limit = 20,
): Promise<TrailEntry[]> {
  const raw = await client.xrevrange(keys.claimsEnded, "+", "-", "COUNT", Math.min(Math.max(1, limit), ENDED_MAX));
  return decodeEntries(raw as StreamReply);
}

function decodeEntries(raw: StreamReply): TrailEntry[] {
  const entries: TrailEntry[] = [];
  for (const [id, list] of raw) {
    const fields: Record<string, string> = {};
    for (let i = 0; i + 1 < list.length; i += 2) fields[list[i]!] = list[i + 1]!;
    const kind = fields.e as TrailKind;
    if (!TRAIL_KINDS.includes(kind)) continue;
    entries.push({
      id,
      at: Number(id.split("-")[0]),
      kind,
      name: fields.n ?? "",
      fence: toNumberOrNull(fields.f),
      holder: holderOf(fields.h),
      by: kind === "taken-over" ? (holderOf(fields.by).workerId ?? null) : fields.by || null,
      reason: fields.why || null,
      ms: toNumberOrNull(fields.ms),
    });
  }
  return entries;
}

function holderOf(json: string | undefined): TrailHolder {
  let parsed: Record<string, unknown> = {};
  try {
    const value: unknown = json ? JSON.parse(json) : {};
    if (value && typeof value === "object") parsed = value as Record<string, unknown>;
  } catch {
    // an unreadable identity shows as unknown
  }
  const text = (v: unknown) => (typeof v === "string" && v !== "" ? v : null);
  return {
    workerId: text(parsed.workerId),
    host: text(parsed.host),
    pid: toNumberOrNull(parsed.pid),
    runId: text(parsed.runId),
    rebuild: text(parsed.rebuild),
    tenant: text(parsed.tenant),
    version: text(parsed.version),
  };
}
