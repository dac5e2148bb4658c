import { z } from "zod";
import { listAudit, MAX_AUDIT_PAGE, type AuditPage } from "../audit";
import type { WebContext } from "../web/context";

export const auditQuery = z.strictObject({
  limit: z
    .string()
    .regex(/^\d{1,6}$/, `must be a whole number from 1 to ${MAX_AUDIT_PAGE}`)
    .transform(Number)
    .refine((n) => n >= 1 && n <= MAX_AUDIT_PAGE, `must be a whole number from 1 to ${MAX_AUDIT_PAGE}`)
    .default(50),
  cursor: z
    .string()
    .regex(/^\d{1,16}-\d{1,8}$/, "must be a cursor from a previous page")
    .optional(),
});

export async function getAudit(context: WebContext, query: z.output<typeof auditQuery>): Promise<AuditPage> {
  const { connections } = context;
  return listAudit(connections.main, connections.keys, { limit: query.limit, cursor: query.cursor ?? null });
}
