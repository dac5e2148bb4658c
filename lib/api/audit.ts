import { z } from "zod";
import { limitParam } from "./input";
import { listAudit, MAX_AUDIT_PAGE, type AuditPage } from "../audit";
import type { WebContext } from "../web/context";

export const auditQuery = z.strictObject({
  limit: limitParam(MAX_AUDIT_PAGE, 50),
  cursor: z
    .string()
    .regex(/^\d{1,16}-\d{1,8}$/, "must be a cursor from a previous page")
    .optional(),
});

export async function getAudit(context: WebContext, query: z.output<typeof auditQuery>): Promise<AuditPage> {
  const { connections } = context;
  return listAudit(connections.main, connections.keys, { limit: query.limit, cursor: query.cursor ?? null });
}
