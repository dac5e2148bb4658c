import { z } from "zod";
import { limitParam } from "./input";
import { listAudit, MAX_AUDIT_PAGE, type AuditPage } from "../audit";
import type { WebContext } from "../web/context";

/** An audit stream entry id (also the paging cursor). */
export const AUDIT_ENTRY_ID = /^\d{1,16}-\d{1,8}$/;

export const auditQuery = z.strictObject({
  limit: limitParam(MAX_AUDIT_PAGE, 50),
  cursor: z.string().regex(AUDIT_ENTRY_ID, "must be a cursor from a previous page").optional(),
  /** Start the page at this entry (a link to one entry, e.g. from a run a force release aborted). */
  entry: z.string().regex(AUDIT_ENTRY_ID, "must be an audit entry id").optional(),
});

export async function getAudit(context: WebContext, query: z.output<typeof auditQuery>): Promise<AuditPage> {
  const { connections } = context;
  return listAudit(connections.main, connections.keys, {
    limit: query.limit,
    cursor: query.cursor ?? null,
    entry: query.entry ?? null,
  });
}
