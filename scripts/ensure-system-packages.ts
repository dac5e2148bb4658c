/**
 * `npm test` needs redis-server, faketime, strace, openssl, Chromium, Prometheus (with promtool) and Alertmanager;
 * installs them where possible, else says how.
 */
import {
  ALERTMANAGER,
  CHROMIUM,
  ensureProgram,
  FAKETIME,
  OPENSSL,
  ProgramMissingError,
  PROMETHEUS,
  REDIS_SERVER,
  STRACE,
} from "../lib/system/packages";

const say = (line: string) => process.stdout.write(`[test] ${line}\n`);
try {
  for (const program of [REDIS_SERVER, FAKETIME, STRACE, OPENSSL, CHROMIUM, PROMETHEUS, ALERTMANAGER])
    say(`${program.binary}: ${ensureProgram(program, say)}`);
} catch (error) {
  if (!(error instanceof ProgramMissingError)) throw error;
  process.stderr.write(`[test] ${error.message}\n`);
  process.exit(1);
}
