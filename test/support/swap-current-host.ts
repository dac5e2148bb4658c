/**
 * A child for test/integration/current-swap-lock.test.ts, in its own process so the test can
 * hold back its system calls with strace, pause it or kill it:
 * - `swap <outputDir> <fence> <hash>`: after a line on stdin, points `current` at a recorded
 *   fence's build (`pointCurrentAtRecord`), as a publisher or repair does. Prints `SWAPPING`
 *   before, then `SWAPPED` or `FAILED <message>`, and exits 0 either way.
 * - `hold <outputDir>`: takes the output's swap lock, prints `LOCKED` (and whether it excludes),
 *   and holds it until stdin ends.
 *
 *   node --import tsx test/support/swap-current-host.ts swap|hold <outputDir> [<fence> <hash>]
 */
import { lockCurrent } from "../../lib/rebuilds/current-lock";
import { pointCurrentAtRecord } from "../../lib/rebuilds/published-fence";

const [mode, outputDir, fence, hash] = process.argv.slice(2);
if (mode === "hold" && outputDir) {
  const lock = await lockCurrent(outputDir);
  process.stdout.write(`LOCKED ${lock.exclusive ? "exclusive" : "not-exclusive"}\n`);
  process.stdin.resume();
  await new Promise((resolve) => process.stdin.once("end", resolve));
  lock.release();
} else if (mode === "swap" && outputDir && fence && hash) {
  // Waits for a line on stdin first: the test attaches strace meanwhile.
  await new Promise((resolve) => process.stdin.once("data", resolve));
  process.stdout.write("SWAPPING\n");
  try {
    await pointCurrentAtRecord(outputDir, Number(fence), hash);
    process.stdout.write("SWAPPED\n");
  } catch (error) {
    process.stdout.write(`FAILED ${(error as Error).message}\n`);
  }
  process.stdin.destroy();
} else {
  throw new Error("usage: swap-current-host.ts swap <outputDir> <fence> <hash> | hold <outputDir>");
}
