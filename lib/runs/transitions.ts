/**
 * The run statuses and the moves between them, written down once. The record scripts
 * (`scripts.ts`) embed `RUN_TRANSITIONS` as a Lua table and refuse any other move, so a caller
 * cannot move a record backwards or out of a final status, however late it writes.
 *
 *   queued ──> running ──> rebuilt | skipped | failed | aborted | superseded | deferred | cancelled
 *      └──────────────────────^ (an attempt may also begin and end in one write)
 */
import { RUN_STATUSES, type RunStatus } from "./types";

export const FINAL_STATUSES = [
  "rebuilt",
  "skipped",
  "failed",
  "aborted",
  "superseded",
  "deferred",
  "cancelled",
] as const;
export type FinalRunStatus = (typeof FINAL_STATUSES)[number];

/** Where each status may go next. A final status goes nowhere. */
export const RUN_TRANSITIONS: { readonly [S in RunStatus]: readonly RunStatus[] } = {
  queued: ["running", ...FINAL_STATUSES],
  running: ["running", ...FINAL_STATUSES],
  rebuilt: [],
  skipped: [],
  failed: [],
  aborted: [],
  superseded: [],
  deferred: [],
  cancelled: [],
};

/**
 * Final statuses an operator may retry from (lib/operations/retry): the run ended without its
 * result, and not by a decision that stands (rebuilt, skipped, deferred, superseded).
 */
export const RETRYABLE_STATUSES: readonly FinalRunStatus[] = ["failed", "aborted", "cancelled"];

export function isFinalStatus(status: string): status is FinalRunStatus {
  return (FINAL_STATUSES as readonly string[]).includes(status);
}

export function canMove(from: RunStatus | null, to: RunStatus): boolean {
  return from === null || RUN_TRANSITIONS[from].includes(to);
}

/** `RUN_TRANSITIONS` and the final statuses, as Lua tables. */
export function transitionsLua(): string {
  const allowed = RUN_STATUSES.map(
    (from) => `${from} = {${RUN_TRANSITIONS[from].map((to) => `${to} = true`).join(", ")}}`,
  ).join(",\n  ");
  const final = FINAL_STATUSES.map((status) => `${status} = true`).join(", ");
  return `
local ALLOWED = {
  ${allowed}
}
local FINAL = {${final}}
`;
}
