/**
 * `claimwatch <command>`: operator actions from a shell (README, "From a shell"). Tables for a
 * person, `--json` for scripts (one JSON document on stdout and nothing else), exit codes in
 * ./outcome.ts. Started by bin/claimwatch.mjs.
 */
import { Command, CommanderError } from "commander";
import { ApiError } from "../lib/http/errors";
import { describeError } from "../lib/describe-error";
import { laterReply } from "../lib/redis/unavailable";
import { COMMANDS } from "./commands";
import { CliFailure, EXIT, type ExitCode, type Outcome } from "./outcome";
import { isRedisUnavailable } from "./session";

const EXIT_CODES_HELP = `
Exit codes:
  0  done (status: both Redis servers answer)
  1  refused or failed: not the claim's owner, nothing to release, a finished job or a schedule's
     tick to cancel, a run that is not retryable, the preview says skip, changed builds, rate limited
  2  bad usage or configuration: unknown command, option, rebuild, tenant, job or run; a rebuild
     without a schedule; bad value; no operator identity
  3  no Redis: none configured or recorded in the data dir (CLAIMWATCH_DATA_DIR), or it does not answer

Redis: REDIS_URL (and CLAIMS_REDIS_URL) when set, else the embedded Redis a running \`npm start\`
recorded in CLAIMWATCH_DATA_DIR (default ./.data). Mutations (release, trigger, cancel, retry,
pause, resume) need an operator: CLAIMWATCH_TOKEN, else the data dir's operator-token when no
tokens are configured.`;

function write(stream: NodeJS.WriteStream, text: string): Promise<void> {
  return new Promise((resolve) => (text ? stream.write(text, () => resolve()) : resolve()));
}

async function finish(outcome: Outcome, json: boolean): Promise<never> {
  if (json) await write(process.stdout, `${JSON.stringify(outcome.json, null, 2)}\n`);
  else if (outcome.human.length) await write(process.stdout, `${outcome.human.join("\n")}\n`);
  // Each problem on its own prefixed line; an indented line (a file excerpt) belongs to the one above.
  const lines = outcome.error?.split("\n").map((line) => (/^\s/.test(line) ? line : `claimwatch: ${line}`));
  if (lines?.length) await write(process.stderr, `${lines.join("\n")}\n`);
  process.exit(outcome.exitCode);
}

function failure(exitCode: ExitCode, code: string, message: string): Outcome {
  return { exitCode, json: { error: { code, message } }, human: [], error: message };
}

/** Thrown errors as outcomes: expected refusals keep their code; anything else is a failure (1). */
function outcomeOfError(error: unknown): Outcome {
  if (error instanceof CliFailure) return failure(error.exitCode, error.code, error.message);
  if (error instanceof ApiError) {
    return failure(error.status < 500 && error.status !== 409 ? EXIT.usage : EXIT.refused, error.code, error.message);
  }
  if (isRedisUnavailable(error)) {
    const later = laterReply(error);
    return failure(
      EXIT.redis,
      "redis-unavailable",
      later ? `Redis refuses this for now: ${later}` : `Redis stopped answering: ${describeError(error)}`,
    );
  }
  return failure(EXIT.refused, "failed", `failed: ${describeError(error)}`);
}

/**
 * The arguments, with a `--json` given before the command (`claimwatch --json claims`) moved after
 * it: the same request as `claimwatch claims --json` (commander knows the flag per command only).
 */
function withJsonAfterCommand(args: string[]): string[] {
  const command = args.findIndex((arg) => !arg.startsWith("-"));
  if (command <= 0 || !args.slice(0, command).includes("--json")) return args;
  const rest = [...args.slice(0, command).filter((arg) => arg !== "--json"), ...args.slice(command)];
  const separator = rest.indexOf("--");
  return separator === -1 ? [...rest, "--json"] : [...rest.slice(0, separator), "--json", ...rest.slice(separator)];
}

const argv = withJsonAfterCommand(process.argv.slice(2));
const wantsJson = argv.includes("--json");
const program = new Command("claimwatch")
  .description("Operate claimwatch from a shell: health, claims, runs, the queue, and operator actions.")
  .addHelpText("after", EXIT_CODES_HELP)
  .showHelpAfterError("(run `claimwatch --help` for the commands)")
  .exitOverride()
  .configureOutput({
    writeErr: (text) => process.stderr.write(text.startsWith("error:") ? `claimwatch: ${text}` : text),
  });

for (const spec of COMMANDS) {
  const command = program.command(spec.usage).description(spec.summary).option("--json", "print JSON for scripts");
  spec.options?.(command);
  command.exitOverride().action(async (...received: unknown[]) => {
    // commander passes the positional arguments, then the options and the command itself.
    const options = received.at(-2) as Record<string, unknown>;
    const args = received.slice(0, -2).flat() as string[];
    let outcome: Outcome;
    try {
      outcome = await spec.run(
        args.filter((a) => a !== undefined),
        options,
      );
    } catch (error) {
      outcome = outcomeOfError(error);
    }
    await finish(outcome, options.json === true);
  });
}

try {
  if (argv.length === 0) {
    program.outputHelp();
    process.exit(EXIT.usage);
  }
  await program.parseAsync(argv, { from: "user" });
} catch (error) {
  if (error instanceof CommanderError) {
    const done = ["commander.helpDisplayed", "commander.help", "commander.version"].includes(error.code);
    if (done) process.exit(EXIT.ok);
    // commander has printed the message on stderr; with --json, stdout still gets one document.
    const message = error.message.replace(/^error: /, "");
    if (wantsJson)
      await write(process.stdout, `${JSON.stringify({ error: { code: "bad-usage", message } }, null, 2)}\n`);
    process.exit(EXIT.usage);
  }
  await finish(outcomeOfError(error), wantsJson);
}
