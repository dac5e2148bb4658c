/** The shape of one CLI command; the table of them is ./index.ts. */
import type { Command } from "commander";
import type { Outcome } from "../outcome";

export interface CommandSpec {
  /** Commander's usage: `release <claim>`. */
  usage: string;
  summary: string;
  /** Extra options (`--json` is added to every command). */
  options?(command: Command): void;
  /** `args`: the positional arguments; `options`: commander's parsed options. */
  run(args: string[], options: Record<string, unknown>): Promise<Outcome>;
}
