/**
 * A stand-in worker for the builds namespace's churn test, run in a mount namespace of its own
 * with private propagation (`unshare --mount --propagation private`): mounts it makes reach no
 * other process, and mounts other tests make never reach it. It enters the namespace for
 * read-only builds once while a tmpfs is mounted or unmounted in its own view under each of the
 * first `toggles` holders (after the holder's first comparison, while it binds builds/), and
 * prints one JSON line: { toggles, generation, current, error }.
 *   unshare --mount --propagation private -- node --import tsx test/support/namespace-churn-host.ts <dir> <toggles>
 */
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { BuildsNamespace } from "../../lib/rebuilds/steps/builds-namespace";

const [dir, wanted] = [process.argv[2]!, Number(process.argv[3])];
const builds = path.join(dir, "output", "builds");
const cwd = path.join(dir, "output", ".work");
const disk = path.join(dir, "disk");
for (const d of [builds, cwd, disk]) fs.mkdirSync(d, { recursive: true });
const namespace = new BuildsNamespace();
const holdersSeen = new Set<number>();
let toggles = 0;
let spinning = true;
// A holder is published (holderPid) in the turn its first comparison runs; its bind (nsenter +
// mount, another process) takes many turns: a change seen here falls between its comparisons.
const spin = () => {
  const pid = namespace.holderPid;
  if (pid !== null && !holdersSeen.has(pid) && toggles < wanted) {
    holdersSeen.add(pid);
    if (toggles % 2 === 0) execFileSync("mount", ["-t", "tmpfs", "cw-churn", disk]);
    else execFileSync("umount", [disk]);
    toggles += 1;
  }
  if (spinning) setImmediate(spin);
};
setImmediate(spin);
const result = await namespace.enter(builds, cwd).then(
  (entry) => {
    const line = { toggles, generation: entry.generation, current: namespace.isCurrent(entry), error: null };
    entry.release();
    namespace.retireEntry(entry, "the test is over");
    return line;
  },
  (error: Error) => ({ toggles, generation: null, current: false, error: error.message }),
);
spinning = false;
process.stdout.write(`${JSON.stringify(result)}\n`);
process.exit(0); // the namespace (and its tmpfs) ends with this process
