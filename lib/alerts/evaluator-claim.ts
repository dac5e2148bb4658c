/**
 * The claim that elects the one process evaluating alert rules (lib/alerts/evaluator.ts). Its own
 * module so the dashboard can tell it from a rebuild's claim without importing the rules.
 * The holder's `rebuild` field carries the process's role (`web` or `worker`).
 */
import { claimName } from "../claims/name";

export const EVALUATOR_CLAIM = claimName("claimwatch-alerts-evaluator");
