export { appendAudit, AUDIT_RETENTION_MS, failureWasAudited, noteAuditedFailure } from "./append";
export { findForceReleaseOfRun, listAudit, MAX_AUDIT_PAGE, type AuditPage, type ListAuditOptions } from "./list";
export type { AuditAction, AuditEntry, AuditEntryInput, AuditResult } from "./types";
