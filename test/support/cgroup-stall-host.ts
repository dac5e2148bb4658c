/**
 * A stand-in worker stopped between entering a step's cgroup and its fork — the one moment a
 * worker is inside a step's cgroup (step-cgroup.ts, spawnInside) — for longer than its warden's
 * silence limit (1 s): it SIGSTOPs itself inside the spawn callback and a helper sends SIGCONT
 * 2.5 s later. Then it forks `setsid sleep 600 & sleep 600` (both carry the caller's marker),
 * does what runCommandStep does after a spawn, and prints one JSON line:
 *   { home, ownAfter, childCgroup, held, report, childSignal }
 *   node --import tsx test/support/cgroup-stall-host.ts
 */
import { spawn } from "node:child_process";
import fs from "node:fs";
import { detectContainment } from "../../lib/rebuilds/steps/containment";
import { StepCgroup } from "../../lib/rebuilds/steps/step-cgroup";
import { stepWarden } from "../../lib/rebuilds/steps/warden";

const ownCgroup = (pid: number | "self") =>
  /^0::(.*)$/m.exec(fs.readFileSync(`/proc/${pid}/cgroup`, "utf8"))?.[1] ?? "?";

stepWarden.start(1_000);
const place = detectContainment("cgroup").stepCgroups!;
const home = ownCgroup("self");
await new Promise((r) => setTimeout(r, 300)); // the warden has read its first lines
const cgroup = StepCgroup.create(place);
const id = stepWarden.watchCgroup(cgroup.dir);
spawn("sh", ["-c", `sleep 2.5; kill -CONT ${process.pid}`], { detached: true, stdio: "ignore" }).unref();
const child = cgroup.spawnInside(() => {
  process.kill(process.pid, "SIGSTOP"); // stops here, inside the step's cgroup
  return spawn("sh", ["-c", "setsid sleep 600 & sleep 600"], { detached: true, stdio: "ignore" });
});
const exited = new Promise<NodeJS.Signals | null>((resolve) => child.once("exit", (_, signal) => resolve(signal)));
const childCgroup = ownCgroup(child.pid!);
const ownAfter = ownCgroup("self");
const held = cgroup.heldByWarden();
if (held) cgroup.killHeld();
const childSignal = await Promise.race([exited, new Promise((r) => setTimeout(() => r("still running"), 5_000))]);
const report = (await stepWarden.killedBecause(id))?.reason ?? null;
await cgroup.remove();
stepWarden.forget(id);
process.stdout.write(`${JSON.stringify({ home, ownAfter, childCgroup, held, report, childSignal })}\n`);
