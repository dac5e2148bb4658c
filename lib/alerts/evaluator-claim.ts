/**
 * The claim that elects the one process evaluating alert rules (lib/alerts/evaluator.ts). Its own
 * module so the dashboard can tell it from a rebuild's claim without importing the rules.
 * The holder's `rebuild` field carries the process's role (`web` or `worker`).
 */
import { claimName } from "../claims/name";

export const EVALUATOR_CLAIM = claimName("claimwatch-alerts-evaluator");

/** Which kind of process evaluates the alert rules; stored as the claim holder's `rebuild` field. */
export type EvaluatorRole = "web" | "worker";

/** The holder of the evaluator's claim as the Claims page names it, from its `rebuild` field. */
export function evaluatorHolderLabel(rebuildField: string | null | undefined): string {
  if (rebuildField === "web") return "web server";
  if (rebuildField === "worker") return "worker";
  return "process of an earlier version";
}
