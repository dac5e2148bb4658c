/**
 * A process with a skewed wall clock: libfaketime preloaded into it (Debian package `faketime`,
 * installed by `npm test`). `Date.now()` is off by `offset`; the monotonic clock stays real, so
 * timers keep working (notes/faults.md). Preloaded rather than `faketime <cmd>`, which forks:
 * the PID a test kills must be the worker's own.
 */
import fs from "node:fs";

const LIBRARIES = [
  "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
  "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
  "/usr/lib/faketime/libfaketime.so.1",
];

/** Environment for a child whose clock is `offset` off (e.g. "-30s", "+5m"). */
export function skewedClockEnv(offset: string): Record<string, string> {
  const library = LIBRARIES.find((file) => fs.existsSync(file));
  if (!library) throw new Error("libfaketime not found: apt-get install -y faketime");
  return { LD_PRELOAD: library, FAKETIME: offset, FAKETIME_DONT_FAKE_MONOTONIC: "1" };
}
