/**
 * `claimwatch release <claim> --token T --reason R`: the owner-checked force release of the Claims
 * page (lib/claims/force-release), audited with the operator's name.
 */
import { EVALUATOR_CLAIM } from "../../lib/alerts/evaluator-claim";
import { auditRefused } from "../../lib/api/handler";
import { describeZodError } from "../../lib/api/errors";
import { releaseBody, releaseClaimAsOperator } from "../../lib/api/claims";
import { DEFER_MIN_MS } from "../../lib/rebuilds/decide";
import { EXIT, refused, usageError } from "../outcome";
import { connect, loadSetup, operatorActor } from "../session";
import type { CommandSpec } from "./spec";

export const release: CommandSpec = {
  usage: "release <claim>",
  summary:
    "force-release a claim held with --token (see `claims`); audited. Its running attempt is aborted and retried once its holder has stopped (to stop it for good, `cancel` instead); nobody else takes the claim before then",
  options(command) {
    command
      .requiredOption(
        "--token <token>",
        "the claim's token as `claimwatch claims` shows it (a newer holder is never released)",
      )
      .requiredOption("--reason <text>", "why, for the audit log (at least 3 characters)");
  },
  async run([name], options) {
    const context = await connect(loadSetup());
    try {
      const actor = await operatorActor(context, "force-release", { name });
      const body = releaseBody.safeParse({ name, token: options.token, reason: options.reason });
      if (!body.success) {
        const problem = describeZodError(body.error);
        await auditRefused(context, "force-release", actor, problem, { name, via: "cli" });
        throw usageError(problem);
      }
      const result = await releaseClaimAsOperator(context, body.data, actor);
      switch (result.status) {
        case "released":
          return {
            exitCode: EXIT.ok,
            json: result,
            human: [
              `Released ${name} (audit entry ${result.auditId}).`,
              name === EVALUATOR_CLAIM
                ? "It elects the process that evaluates the alert rules (no rebuild, no job): its holder stops evaluating, and a live web server or worker takes the evaluation over once the claim is free."
                : `Its holder is told to stop: the running attempt is aborted and retried (deferred, no attempt spent) once it has stopped, at the latest in ${Math.ceil((result.releaseWindowMs + DEFER_MIN_MS) / 1000)} s; to stop the rebuild for good, \`claimwatch cancel\` its job instead.`,
              `Nobody else can take the claim until the holder has stopped, or ${Math.ceil(result.releaseWindowMs / 1000)} s have passed: a holder still running then (stuck in a system call, paused) is not waited for further; its late publish cannot put its build over a newer one.`,
            ],
          };
        case "releasing":
          return refused(
            "releasing",
            `not released again: ${name} was force-released already and its holder has not stopped yet; it is free at the latest in ${Math.ceil(result.releaseWindowMs / 1000)} s (audit entry ${result.auditId})`,
            result,
          );
        case "not-owner":
          return refused(
            "not-owner",
            `not released: ${name} is held with another token now (by ${result.currentHolder ?? "another holder"}); nothing changed — run \`claimwatch claims\` for its current token (audit entry ${result.auditId})`,
            result,
          );
        case "missing":
          return refused(
            "missing",
            `not released: nobody holds ${name} (it expired or was released) (audit entry ${result.auditId})`,
            result,
          );
      }
    } finally {
      await context.close();
    }
  },
};
