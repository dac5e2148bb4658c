/**
 * What a CLI command ends with: its exit code, the value `--json` prints and the lines a person
 * reads. Expected refusals are outcomes; `CliFailure` stops a command early with one of them.
 */

/** Exit codes of `claimwatch` (README, "From a shell"). */
export const EXIT = {
  /** Done; for `status`, both Redis servers answer. */
  ok: 0,
  /** Refused or failed: not the owner, nothing to release or cancel, not retryable, would be skipped, changed builds. */
  refused: 1,
  /** Bad usage or configuration: unknown command, option, rebuild, tenant, job or run; bad value; no operator identity. */
  usage: 2,
  /** No Redis to talk to: none configured or found in the data dir, or it does not answer. */
  redis: 3,
} as const;
export type ExitCode = (typeof EXIT)[keyof typeof EXIT];

export interface Outcome {
  exitCode: ExitCode;
  /** Printed as the only thing on stdout with `--json`. */
  json: unknown;
  /** Printed on stdout without `--json`. */
  human: string[];
  /** A one-line message for stderr (refusals and errors), printed in both modes. */
  error?: string;
}

export class CliFailure extends Error {
  constructor(
    readonly exitCode: ExitCode,
    readonly code: string,
    message: string,
  ) {
    super(message);
    this.name = "CliFailure";
  }
}

export const usageError = (message: string) => new CliFailure(EXIT.usage, "bad-usage", message);

/** A refusal as an outcome: `{"error":{"code","message"}}` with `--json`, the message on stderr. */
export function refused(code: string, message: string, extra: Record<string, unknown> = {}): Outcome {
  return { exitCode: EXIT.refused, json: { error: { code, message }, ...extra }, human: [], error: message };
}
