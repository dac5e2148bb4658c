/**
 * A child for test/integration/build-durable.test.ts, run under strace: promotes a finished work
 * directory (`promoteBuild`) and points `current` at it, as a rebuild's publish does on disk.
 * Prints `PROMOTED <hash>` or `FAILED <code> <message>` and exits 0 either way.
 *
 *   node --import tsx test/support/promote-host.ts <outputDir> <workDir>
 */
import { hashDirectory, pointCurrent, promoteBuild } from "../../lib/rebuilds/output";

const [outputDir, workDir] = process.argv.slice(2);
if (!outputDir || !workDir) throw new Error("usage: promote-host.ts <outputDir> <workDir>");
try {
  const hash = await hashDirectory(workDir);
  await promoteBuild(outputDir, workDir, hash);
  await pointCurrent(outputDir, hash);
  process.stdout.write(`PROMOTED ${hash}\n`);
} catch (error) {
  const code = (error as NodeJS.ErrnoException).code ?? "-";
  process.stdout.write(`FAILED ${code} ${(error as Error).message}\n`);
}
