/** Audit log entries: who did what to which resource, why, and how it ended. */

/** Operator actions that are audited. */
export type AuditAction =
  | "force-release"
  | "trigger"
  | "login"
  | "logout"
  | "alert-test"
  | "cancel"
  | "retry"
  | "pause-schedule"
  | "resume-schedule"
  /** A schedule change whose body named neither pause nor resume (refused; helper-137: it was audited as a pause). */
  | "change-schedule";

/** `refused`: the action was declined as asked (e.g. a stale token); `failed`: an error. */
export type AuditResult = "done" | "refused" | "failed";

export interface AuditEntryInput {
  /** Who: the operator's user name / id. */
  actor: string;
  action: AuditAction;
  /** Why, in the operator's words. */
  reason: string;
  result: AuditResult;
  /** Action-specific facts (claim name, tokens, fence, holder…), stored as JSON. */
  detail: Record<string, unknown>;
}

export interface AuditEntry extends AuditEntryInput {
  /** Stream entry id; also the cursor for paging. */
  id: string;
  /** Server time of the entry, ms since epoch (from the id). */
  at: number;
}
