/**
 * The soak's rebuild step, written into the soak's temp dir and run by claimwatch as a `run`
 * step (`node step.mjs <journal dir> <chatty|quiet> <chunk ms> <min parts> <extra parts> [<input> <p>]`).
 *
 * With an input and p > 0 it first reads its input file and, with probability p, fails that read
 * as a disk would (EIO): it says so on stderr and exits 75 (EX_TEMPFAIL), which the soak's
 * definitions declare transient — the attempt is retried, and the request must still end rebuilt.
 *
 * It writes the build of content.ts slowly (one part file per chunk, with a sleep between) and
 * appends every write to `<journal dir>/<rebuild>.journal`, a file outside Redis and outside
 * the output directory, opened O_APPEND; each line is one write(2) of < PIPE_BUF bytes, so
 * lines of concurrent writers never interleave. Line format (space separated):
 *
 *   <ms> <kind> <runId> <pid> <ppid at start> <ppid now> <fence|?> <tenant|-> <version> <detail>
 *
 * kinds: start (detail: parts), w+ / w- (before / after writing part <detail>), end, term
 * (SIGTERM from claimwatch's abort), stdout-EPIPE (its worker is gone: the log pipe broke).
 * `ppid now` differs from `ppid at start` once the worker that spawned it has died.
 * The fence is CLAIMWATCH_FENCE when claimwatch passes it, else "?".
 *
 * chatty: a log line per chunk (an orphaned step dies of EPIPE at its next line);
 * quiet: output only at the end (like tar or a tiler), so an orphan writes on.
 *
 * Escapees: every run also starts a background writer (a child of a child, reparented when that
 * exits) and a double-forked `setsid` daemon that ignores SIGTERM. Both keep the work dir as their
 * cwd and wait until it has been moved (published as builds/<hash>) or removed, then try to write
 * `late.txt` into it (a changed published build: the checker's `corrupt`) and a line to
 * `<journal dir>/escaped-writes.txt`, and stay alive. Contained, they die with the step before
 * that; the soak's sampler counts any found alive after their run ended (`escaped`).
 */
export const STEP_SCRIPT = String.raw`
import { spawn } from "node:child_process";
import crypto from "node:crypto";
import fs from "node:fs";
import path from "node:path";

const [journalDir, mode, chunkMs, minParts, spanParts, inputFile, inputEio] = process.argv.slice(2);
if (inputFile) {
  if (Math.random() < Number(inputEio ?? 0)) {
    process.stderr.write("reading " + inputFile + ": EIO (injected by the soak)\n");
    process.exit(75);
  }
  fs.readFileSync(inputFile);
}
const env = process.env;
const runId = env.CLAIMWATCH_RUN_ID;
const rebuild = env.CLAIMWATCH_REBUILD;
const tenant = env.CLAIMWATCH_TENANT || "-";
const version = env.CLAIMWATCH_VERSION;
const work = env.CLAIMWATCH_WORK;
const fence = env.CLAIMWATCH_FENCE || "?";
// PIDs as the host sees them: a contained step runs in a PID namespace of its own, where it is
// pid 2; /proc is the host's, and /proc/self names the host's pid.
const hostPid = () => {
  try {
    return Number(fs.readlinkSync("/proc/self"));
  } catch {
    return process.pid;
  }
};
const hostPpid = () => {
  try {
    const stat = fs.readFileSync("/proc/self/stat", "utf8");
    return Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
  } catch {
    return process.ppid;
  }
};
const pid = hostPid();
const ppidAtStart = hostPpid();
const journal = fs.openSync(path.join(journalDir, rebuild + ".journal"), "a");

const ESCAPEE = 'trap "" TERM; cd "$1" || exit 0; while [ -d "$1" ]; do sleep 0.2; done; ' +
  'echo "late write by an escaped process" >> late.txt 2>/dev/null; echo "$(date +%s%3N) $2" >> "$3/escaped-writes.txt"; sleep 120';
spawn("sh", ["-c", "(sh -c \"$0\" escapee \"$1\" \"$2\" \"$3\" &) ; exit 0", ESCAPEE, work, runId, journalDir], {
  stdio: "ignore",
});
spawn("sh", ["-c", "(setsid sh -c \"$0\" escapee \"$1\" \"$2\" \"$3\" &) &", ESCAPEE, work, runId, journalDir], {
  stdio: "ignore",
  detached: true,
});

function note(kind, detail) {
  const fields = [Date.now(), kind, runId, pid, ppidAtStart, hostPpid(), fence, tenant, version, detail ?? "-"];
  fs.writeSync(journal, fields.join(" ") + "\n");
}

process.on("SIGTERM", () => {
  note("term");
  process.exit(143);
});
process.stdout.on("error", (error) => {
  note("stdout-" + (error.code || "error"));
  process.exit(141);
});

const sha = (text) => crypto.createHash("sha256").update(text).digest("hex");
const key = rebuild + "|" + tenant + "|" + version;
const parts = Number(minParts) + (parseInt(sha(key).slice(0, 8), 16) % (Number(spanParts) + 1));
note("start", String(parts));
if (mode === "chatty") console.log("start " + runId + " parts=" + parts);
// The soak fills the outputs' disk now and then (disk-full): a write refused for want of space
// ends the step with 75, declared transient, as an operator would declare it.
const writeOrExit = (file, content) => {
  try {
    fs.writeFileSync(file, content);
  } catch (error) {
    if (error.code !== "ENOSPC") throw error;
    note("enospc");
    process.stderr.write("writing " + file + ": ENOSPC (the soak filled the disk)\n");
    process.exit(75);
  }
};
for (let i = 0; i < parts; i++) {
  const line = key + "|" + i + "|" + sha(key + "|" + i) + "\n";
  note("w+", String(i));
  writeOrExit(path.join(work, "part-" + String(i).padStart(3, "0") + ".txt"), line.repeat(40 + ((i * 7) % 60)));
  note("w-", String(i));
  if (mode === "chatty") console.log("chunk " + (i + 1) + "/" + parts);
  await new Promise((resolve) => setTimeout(resolve, Number(chunkMs) * (0.5 + Math.random())));
}
writeOrExit(path.join(work, "meta.json"), JSON.stringify({ rebuild, tenant, version, parts }) + "\n");
note("end", String(parts));
console.log("done: " + parts + " parts");
`;
