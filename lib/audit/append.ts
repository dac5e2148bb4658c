/**
 * Appends to the audit log: a Redis Stream, trimmed in the same script to entries younger than
 * `AUDIT_RETENTION_MS` (exact MINID on server time) and capped at `AUDIT_MAX_ENTRIES`.
 */
import type { RedisKeys } from "../redis/keys";
import { AUDIT_APPEND, runScript, type ScriptingClient } from "../redis/scripts";
import type { AuditEntryInput } from "./types";

/** Audit entries are kept at least this long… */
export const AUDIT_RETENTION_MS = 90 * 24 * 60 * 60 * 1000;
/** …unless the log outgrows this many entries (a flood of refused requests), oldest dropped first. */
export const AUDIT_MAX_ENTRIES = 1_000_000;

/** Returns the new entry's id. */
export async function appendAudit(client: ScriptingClient, keys: RedisKeys, entry: AuditEntryInput): Promise<string> {
  const id = await runScript(client, AUDIT_APPEND, [keys.auditLog], [
    AUDIT_RETENTION_MS,
    AUDIT_MAX_ENTRIES,
    "actor", entry.actor,
    "action", entry.action,
    "reason", entry.reason,
    "result", entry.result,
    "detail", JSON.stringify(entry.detail),
  ]); // prettier-ignore
  return String(id);
}

const auditedFailures = new WeakSet<object>();

/** Marks an error whose operation audited its failure itself: the API's route wrapper does not again. */
export function noteAuditedFailure(error: unknown): void {
  if (typeof error === "object" && error !== null) auditedFailures.add(error);
}

export function failureWasAudited(error: unknown): boolean {
  return typeof error === "object" && error !== null && auditedFailures.has(error);
}
