/** Decoding of claim metadata as Redis returns it (script field lists and HGETALL hashes). */
import { META_FIELDS } from "../redis/scripts";
import type { ClaimHolder } from "./types";

/** Holder from a script reply: the values of `META_FIELDS`, in order, starting at `offset`. */
export function holderFromFieldList(reply: readonly unknown[], offset: number): ClaimHolder {
  const hash: Record<string, string> = {};
  META_FIELDS.forEach((field, i) => {
    hash[field] = String(reply[offset + i] ?? "");
  });
  return holderFromHash(hash);
}

/** Holder from an HGETALL of the metadata hash. */
export function holderFromHash(hash: Record<string, string>): ClaimHolder {
  const identity = parseIdentity(hash.holder);
  return {
    host: stringOrNull(identity.host),
    pid: toNumberOrNull(identity.pid),
    workerId: stringOrNull(identity.workerId),
    jobId: stringOrNull(hash.jobId),
    attempt: toNumberOrNull(identity.attempt),
    runId: stringOrNull(identity.runId),
    rebuild: stringOrNull(identity.rebuild),
    tenant: stringOrNull(identity.tenant),
    version: stringOrNull(identity.version),
    fence: toNumberOrNull(hash.fence),
    ttlMs: toNumberOrNull(hash.ttlMs),
    refreshEveryMs: toNumberOrNull(hash.refreshEveryMs),
    acquiredAt: toNumberOrNull(hash.acquiredAt),
    refreshedAt: toNumberOrNull(hash.refreshedAt),
    stopWithinMs: toNumberOrNull(identity.stopWithinMs),
    revokedBy: stringOrNull(hash.revokedBy),
    revokedAt: toNumberOrNull(hash.revokedAt),
  };
}

/** What a census record (CLAIM_CENSUS) carries of a holder: staleness, alerts and metrics read only this. */
export type CensusHolder = Pick<
  ClaimHolder,
  | "host"
  | "pid"
  | "workerId"
  | "rebuild"
  | "tenant"
  | "fence"
  | "refreshEveryMs"
  | "acquiredAt"
  | "refreshedAt"
  | "revokedAt"
>;

/**
 * Holder from a census record's fields after the PTTL: `refreshedAt,refreshEveryMs,acquiredAt,
 * fence,revokedAt,holder` (`CENSUS_FIELDS`), `from` the index where they start. Decoded as `holderFromHash`
 * decodes the same fields.
 */
export function holderFromCensusRecord(record: string, from: number): CensusHolder {
  const c1 = record.indexOf(",", from);
  const c2 = record.indexOf(",", c1 + 1);
  const c3 = record.indexOf(",", c2 + 1);
  const c4 = record.indexOf(",", c3 + 1);
  const c5 = record.indexOf(",", c4 + 1);
  if (c1 < 0 || c2 < 0 || c3 < 0 || c4 < 0 || c5 < 0) throw unexpectedReply("census", record);
  const identity = parseIdentity(record.slice(c5 + 1));
  return {
    host: stringOrNull(identity.host),
    pid: toNumberOrNull(identity.pid),
    workerId: stringOrNull(identity.workerId),
    rebuild: stringOrNull(identity.rebuild),
    tenant: stringOrNull(identity.tenant),
    refreshedAt: toNumberOrNull(record.slice(from, c1)),
    refreshEveryMs: toNumberOrNull(record.slice(c1 + 1, c2)),
    acquiredAt: toNumberOrNull(record.slice(c2 + 1, c3)),
    fence: toNumberOrNull(record.slice(c3 + 1, c4)),
    revokedAt: toNumberOrNull(record.slice(c4 + 1, c5)),
  };
}

/** The holder identity as `acquireClaim` writes it into the `holder` field. */
export interface HolderIdentity {
  host: string;
  pid: number;
  workerId: string;
  runId: string;
  /** The attempt of the job (`ClaimMetadata.attempt`); absent when unknown. The acquire script reads it. */
  attempt?: number;
  rebuild: string;
  tenant: string;
  version: string;
  /** Absent: 0 (the holder stops as soon as it notices). */
  stopWithinMs?: number;
}

function parseIdentity(json: string | undefined): Partial<Record<keyof HolderIdentity, unknown>> {
  if (!json) return {};
  try {
    const parsed: unknown = JSON.parse(json);
    return parsed && typeof parsed === "object" ? (parsed as Record<string, unknown>) : {};
  } catch {
    return {};
  }
}

function stringOrNull(value: unknown): string | null {
  return typeof value === "string" && value !== "" ? value : null;
}

export function toNumberOrNull(raw: unknown): number | null {
  if (raw === null || raw === undefined || raw === "") return null;
  const value = Number(raw);
  return Number.isFinite(value) ? value : null;
}

/** A Lua script broke its documented reply shape: an invariant, so it throws. */
export function unexpectedReply(script: string, reply: unknown): Error {
  return new Error(`unexpected reply from the ${script} script: ${JSON.stringify(reply)}`);
}
