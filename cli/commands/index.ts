/**
 * The commands of `claimwatch`, in the order `--help` lists them. A new command is one file in
 * this directory and one entry here; each is thin: it parses its options, calls lib/ (mostly the
 * same lib/api functions the route handlers call) and returns an `Outcome`. Mutations take the
 * operator from `operatorActor` and audit their own refusals once (see ./release.ts, ./cancel.ts).
 */
import { cancel } from "./cancel";
import { claims } from "./claims";
import { pause } from "./pause";
import { queue } from "./queue";
import { release } from "./release";
import { resume } from "./resume";
import { retry } from "./retry";
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
  cancel,
  retry,
  pause,
  resume,
  runs,
  queue,
  verify,
];
