/**
 * The commands of `claimwatch`, in the order `--help` lists them. A new command is one file in
 * this directory and one entry here; each is thin: it parses its options, calls lib/ (mostly the
 * same lib/api functions the route handlers call) and returns an `Outcome`.
 */
import { claims } from "./claims";
import { queue } from "./queue";
import { release } from "./release";
import { runs } from "./runs";
import type { CommandSpec } from "./spec";
import { status } from "./status";
import { trigger } from "./trigger";
import { verify } from "./verify";

export const COMMANDS: readonly CommandSpec[] = [
  status,
  claims,
  release,
  trigger,
  runs,
  queue,
  verify,
  // Issue 15: `cancel <run|job>`, `retry <run>`, `pause <rebuild> [--tenant]` and `resume` are
  // registered here once lib/ has them (one file each, like ./release.ts, audited like it).
];
