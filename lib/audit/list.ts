/** Reading the audit log, newest first, in pages (XREVRANGE: O(page)). */
import type { Redis } from "ioredis";
import type { RedisKeys } from "../redis/keys";
import type { AuditAction, AuditEntry, AuditResult } from "./types";

export const MAX_AUDIT_PAGE = 500;

export interface ListAuditOptions {
  /** Page size (1…500), default 50. */
  limit?: number;
  /** `nextCursor` of the previous page: entries older than it are returned. */
  cursor?: string | null;
  /** An entry's id: the page starts with that entry (a link to one entry); ignored with `cursor`. */
  entry?: string | null;
}

export interface AuditPage {
  entries: AuditEntry[];
  nextCursor: string | null;
}

export async function listAudit(
  client: Pick<Redis, "xrevrange">,
  keys: RedisKeys,
  options: ListAuditOptions = {},
): Promise<AuditPage> {
  const limit = options.limit ?? 50;
  if (!Number.isSafeInteger(limit) || limit < 1 || limit > MAX_AUDIT_PAGE) {
    throw new RangeError(`limit must be a whole number from 1 to ${MAX_AUDIT_PAGE} (got ${limit})`);
  }
  const end = options.cursor ? `(${options.cursor}` : (options.entry ?? "+");
  const rows = await client.xrevrange(keys.auditLog, end, "-", "COUNT", limit);
  const entries = rows.map(([id, fields]) => entryFromFields(id, fields));
  const nextCursor = rows.length === limit ? rows[rows.length - 1]![0] : null;
  return { entries, nextCursor };
}

function entryFromFields(id: string, fields: string[]): AuditEntry {
  const hash: Record<string, string> = {};
  for (let i = 0; i + 1 < fields.length; i += 2) hash[fields[i]!] = fields[i + 1]!;
  let detail: Record<string, unknown> = {};
  try {
    const parsed: unknown = JSON.parse(hash.detail ?? "{}");
    if (parsed && typeof parsed === "object" && !Array.isArray(parsed)) detail = parsed as Record<string, unknown>;
  } catch {
    detail = { unparsed: hash.detail };
  }
  return {
    id,
    at: Number(id.split("-")[0]),
    actor: hash.actor ?? "",
    action: (hash.action ?? "") as AuditAction,
    reason: hash.reason ?? "",
    result: (hash.result ?? "") as AuditResult,
    detail,
  };
}

/**
 * The force release that aborted run `runId`: the newest `done` force-release entry between
 * `from` and `to` (server ms, the attempt's start and end) whose holder was that run. XRANGE over
 * that window only, at most 500 entries.
 */
export async function findForceReleaseOfRun(
  client: Pick<Redis, "xrange">,
  keys: RedisKeys,
  runId: string,
  from: number,
  to: number,
): Promise<AuditEntry | null> {
  const rows = await client.xrange(keys.auditLog, String(Math.max(0, from)), String(to), "COUNT", MAX_AUDIT_PAGE);
  const found = rows
    .map(([id, fields]) => entryFromFields(id, fields))
    .filter(
      (entry) =>
        entry.action === "force-release" &&
        entry.result === "done" &&
        (entry.detail.holder as { runId?: unknown } | undefined)?.runId === runId,
    );
  return found.at(-1) ?? null;
}
