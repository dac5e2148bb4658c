// Runs one `run` step program for a worker, and makes sure it never outlives that worker.
//
//   node step-guard.mjs <graceMs> <program> [args…]
//
// The worker starts this guard in a process group of its own and keeps a pipe to its stdin.
// The program runs in the same group. When the worker aborts the step it signals the whole
// group. When the worker dies — even by SIGKILL, which no handler sees — the kernel closes the
// pipe: the guard then sends SIGTERM to the group and SIGKILL after the grace period, so an
// orphaned step cannot go on writing while another worker holds the claim.
// Exit code: the program's, or 128 + signal number; 127 when the program cannot be started.
import { spawn } from "node:child_process";
import { constants } from "node:os";

const [graceArg, program, ...args] = process.argv.slice(2);
const graceMs = Number(graceArg);
if (!program || !Number.isFinite(graceMs)) {
  process.stderr.write("usage: step-guard.mjs <graceMs> <program> [args…]\n");
  process.exit(64);
}

// SIGTERM/SIGINT aimed at the group are for the program; the guard waits for it to end.
process.on("SIGTERM", () => {});
process.on("SIGINT", () => {});

const child = spawn(program, args, { stdio: ["ignore", "inherit", "inherit"] });
child.on("error", (error) => {
  process.stderr.write(`${error.code === "ENOENT" ? "program not found" : "cannot start"}: ${program}\n`);
  process.exit(127);
});
child.on("exit", (code, signal) => {
  process.exit(code ?? 128 + (constants.signals[signal] ?? 0));
});

const orphaned = () => {
  try {
    process.kill(-process.pid, "SIGTERM");
  } catch {
    // the group is gone already
  }
  setTimeout(() => {
    try {
      process.kill(-process.pid, "SIGKILL");
    } catch {
      process.exit(137);
    }
  }, graceMs).unref();
};
process.stdin.on("end", orphaned);
process.stdin.on("error", orphaned);
process.stdin.resume();
