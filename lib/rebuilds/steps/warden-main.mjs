/**
 * The step warden: one small process per worker that ends the worker's steps when the worker
 * can no longer do it itself. Plain JavaScript, no imports beyond Node: it starts in one Node
 * start-up, once per worker, and costs a step nothing but a line on a pipe.
 *
 *   node warden-main.mjs <worker pid> [<lines>]
 *
 * `<lines>`: protocol lines (below), newline-separated, that the worker knew at the start: its
 * silence and the steps it watches (a warden started again).
 *
 * It reads lines from the worker on stdin (protocol in warden.ts):
 *   silence <ms>          the longest the worker may go without a line (0: no limit)
 *   watch <id> <pid> <g>  a step: SIGKILL `pid` and what it started (`g` 1: its process group;
 *                         0: `pid` is `unshare --kill-child`, so its child, the PID namespace's
 *                         init, goes first and the kernel ends the rest of the namespace)
 *   watch-cgroup <id> <dir>  a step's cgroup v2 (step-cgroup.ts), announced before the worker
 *                         enters it to spawn: killed with `cgroup.kill`. If the worker itself is
 *                         in it (stopped mid-spawn), the worker is first moved into
 *                         `<parent>/worker-held` (WORKER_HELD in step-cgroup.ts), never killed.
 *   forget <id>           the step ended
 *   beat <n>              the worker's event loop ran; answered at once with `beat <n>` (the
 *                         worker replaces a warden that stops answering: warden.ts)
 * and writes `killed <id> <monotonic ms> <reason>` for each step it ends.
 *
 * Two rules:
 *  - EOF: the worker died (SIGKILL, OOM, a crash): every step it ran dies now — the watched
 *    ones, and any process whose environment says it is a step of this worker
 *    (`CLAIMWATCH_STEP_OF=<worker pid>`), which covers a step spawned a moment before the
 *    worker died and not yet announced. Then the warden exits.
 *  - Silence: the worker has not run for `silence` ms (its event loop is blocked, or it is
 *    SIGSTOPped without this process, which has a process group of its own). Its job lock has
 *    run out by then, so BullMQ hands the job to another attempt, which may take the claim over
 *    at once: the old attempt's steps must not write beside it. Every watched step dies.
 *
 * SIGTERM, SIGINT and SIGHUP are ignored: the warden ends when the worker does (EOF), never
 * before it, whatever a terminal or a deploy sends.
 */
import fs from "node:fs";
import path from "node:path";

const workerPid = Number(process.argv[2]);
/** @type {Map<string, { pid: number; group: boolean } | { cgroup: string }>} */
const watched = new Map();
/** Parents of the step cgroups announced (`claimwatch-steps-<pid namespace>-<worker pid>-<start time>`), removed at EOF. */
const cgroupParents = new Set();
const WORKER_HELD = "worker-held";
let silenceMs = 0;
let lastLine = performance.now();

for (const signal of ["SIGTERM", "SIGINT", "SIGHUP"]) process.on(signal, () => {});

function send(signal, pid) {
  try {
    process.kill(pid, signal);
  } catch {
    // gone already
  }
}

function childrenOf(pid) {
  try {
    return fs.readFileSync(`/proc/${pid}/task/${pid}/children`, "utf8").trim().split(/\s+/).filter(Boolean).map(Number);
  } catch {
    return [];
  }
}

function readOr(file, fallback) {
  try {
    return fs.readFileSync(file, "utf8");
  } catch {
    return fallback;
  }
}

/**
 * `cgroup.kill` for a step's cgroup — never with the worker inside: a worker stopped between
 * entering the cgroup and leaving it (step-cgroup.ts, spawnInside) is moved to `worker-held`
 * first. If that move fails, the cgroup's other processes are SIGKILLed one by one instead.
 */
function killCgroup(dir) {
  const procs = () => readOr(path.join(dir, "cgroup.procs"), "").split("\n").filter(Boolean).map(Number);
  if (procs().includes(workerPid)) {
    try {
      const held = path.join(path.dirname(dir), WORKER_HELD);
      fs.mkdirSync(held, { recursive: true });
      fs.writeFileSync(path.join(held, "cgroup.procs"), String(workerPid));
    } catch {
      for (const pid of procs()) if (pid !== workerPid) send("SIGKILL", pid);
      return;
    }
  }
  try {
    fs.writeFileSync(path.join(dir, "cgroup.kill"), "1");
  } catch {
    // removed already
  }
}

function sleepSync(ms) {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

/** The worker is dead: kill and remove every cgroup under its parents (2 s at most), then the parents. */
function removeCgroupParents() {
  const deadline = performance.now() + 2_000;
  for (const parent of cgroupParents) {
    let children;
    try {
      children = fs.readdirSync(parent, { withFileTypes: true }).filter((e) => e.isDirectory());
    } catch {
      continue;
    }
    for (const child of children) {
      try {
        fs.writeFileSync(path.join(parent, child.name, "cgroup.kill"), "1");
      } catch {
        // gone
      }
    }
    for (const child of children) {
      const dir = path.join(parent, child.name);
      while (readOr(path.join(dir, "cgroup.events"), "").includes("populated 1") && performance.now() < deadline) {
        sleepSync(5);
      }
      try {
        fs.rmdirSync(dir);
      } catch {
        // still populated: the worker's successor removes it at its start
      }
    }
    try {
      fs.rmdirSync(parent);
    } catch {
      // not empty
    }
  }
}

function killStep(id, reason) {
  const step = watched.get(id);
  if (!step) return;
  watched.delete(id);
  if ("cgroup" in step) killCgroup(step.cgroup);
  else if (step.group) send("SIGKILL", -step.pid);
  else {
    for (const init of childrenOf(step.pid)) send("SIGKILL", init);
    send("SIGKILL", step.pid);
  }
  // The moment on the host's monotonic clock (the same in every process here, and never faked):
  // the worker learns of the kill only once it runs again, and dates the step's end by it.
  process.stdout.write(`killed ${id} ${Number(process.hrtime.bigint() / 1_000_000n)} ${reason}\n`);
}

/** Processes that say they are steps of this worker (their environment), for the EOF sweep. */
function markedSteps() {
  const needle = Buffer.from(`\0CLAIMWATCH_STEP_OF=${workerPid}\0`);
  const found = [];
  for (const entry of fs.readdirSync("/proc")) {
    if (!/^\d+$/.test(entry) || Number(entry) === process.pid) continue;
    try {
      const environ = Buffer.concat([Buffer.from("\0"), fs.readFileSync(`/proc/${entry}/environ`), Buffer.from("\0")]);
      if (environ.includes(needle)) found.push(Number(entry));
    } catch {
      // exited meanwhile, or not ours
    }
  }
  return found;
}

function handle(line) {
  const [command, id, pid, group] = line.split(" ");
  if (command === "watch" && id) watched.set(id, { pid: Number(pid), group: group === "1" });
  else if (command === "watch-cgroup" && id) {
    const dir = line.slice(command.length + id.length + 2); // may hold spaces
    watched.set(id, { cgroup: dir });
    cgroupParents.add(path.dirname(dir));
  } else if (command === "forget" && id) watched.delete(id);
  else if (command === "silence") silenceMs = Number(id) || 0;
  else if (command === "beat" && id) process.stdout.write(`beat ${id}\n`);
}

// What the worker knew when it started this warden (its silence, the steps it watches), given
// with the start itself: a worker stopped right after the spawn has told them already.
for (const line of (process.argv[3] ?? "").split("\n")) if (line) handle(line);

let rest = "";
process.stdin.setEncoding("utf8");
process.stdin.on("data", (chunk) => {
  lastLine = performance.now();
  const lines = (rest + chunk).split("\n");
  rest = lines.pop() ?? "";
  for (const line of lines) handle(line);
});
process.stdin.on("end", () => {
  for (const id of [...watched.keys()]) killStep(id, "the worker exited");
  // Twice: a marked process may fork while the first sweep runs.
  for (let round = 0; round < 2; round++) for (const pid of markedSteps()) send("SIGKILL", pid);
  removeCgroupParents();
  process.exit(0);
});

setInterval(() => {
  if (silenceMs <= 0 || watched.size === 0) return;
  const silent = performance.now() - lastLine;
  if (silent < silenceMs) return;
  for (const id of [...watched.keys()]) {
    killStep(id, `the worker did not run for ${Math.round(silent)} ms (limit ${silenceMs} ms: its job lock ran out)`);
  }
}, 100);
