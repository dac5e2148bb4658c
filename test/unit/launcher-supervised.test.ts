/**
 * npm start's supervision of one child (lib/launcher/supervised.ts), with stand-in children (the
 * launcher test kills real ones): started again after an exit, given up on in a crash loop (or a
 * refused configuration when there is no configuration to watch; else started again once it
 * changes), and never started again once the launcher stops.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import type { ChildExit } from "../../lib/launcher/children";
import { Supervised, type Running } from "../../lib/launcher/supervised";

const FAST = { firstDelayMs: 5, maxDelayMs: 20, maxExits: 3, windowMs: 60_000 };
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A stand-in child: `end()` makes it exit as given; `stop()` ends it as SIGTERM would. */
function child(pid: number) {
  let end!: (exit: ChildExit) => void;
  const exited = new Promise<ChildExit>((resolve) => (end = resolve));
  const running: Running & { end: typeof end; stopped: boolean } = {
    pid,
    exited,
    end,
    stopped: false,
    stop: async () => {
      running.stopped = true;
      end({ code: null, signal: "SIGTERM" });
    },
  };
  return running;
}

function bed(
  options: { configExits?: boolean; failStarts?: number; stamp?: () => string; problem?: () => string | null } = {},
) {
  const lines: string[] = [];
  const gaveUp: [string, number][] = [];
  const started: ReturnType<typeof child>[] = [];
  const recorded: number[] = [];
  let stopping = false;
  let failStarts = options.failStarts ?? 0;
  const first = child(1);
  const supervised = new Supervised({
    label: "worker",
    first,
    startAgain: async () => {
      if (failStarts-- > 0) throw new Error("spawn EAGAIN");
      const next = child(2 + started.length);
      started.push(next);
      return next;
    },
    stopping: () => stopping,
    giveUp: (reason, code) => {
      stopping = true;
      gaveUp.push([reason, code]);
    },
    record: (running) => recorded.push(running.pid),
    say: (line) => lines.push(line),
    policy: FAST,
    ...(options.configExits === undefined ? {} : { configExits: options.configExits }),
    ...(options.stamp
      ? {
          configCheck: { what: "claimwatch.yaml", stamp: options.stamp, problem: options.problem ?? (() => null) },
          configPollMs: 5,
        }
      : {}),
  });
  return { supervised, first, started, lines, gaveUp, recorded, stop: () => (stopping = true) };
}

test("a child that ends is started again, recorded, and watched in turn", async () => {
  const b = bed();
  b.first.end({ code: null, signal: "SIGKILL" });
  await sleep(50);
  assert.equal(b.started.length, 1);
  assert.equal(b.supervised.current, b.started[0]);
  assert.deepEqual(b.recorded, [2]);
  assert.match(
    b.lines[0]!,
    /^the worker \(pid 1\) was killed by SIGKILL; starting it again in 0\.005 s \(restart 1\)$/,
  );
  assert.equal(b.lines[1], "the worker was started again (pid 2)");
  b.started[0]!.end({ code: 1, signal: null });
  await sleep(50);
  assert.equal(b.started.length, 2, "the new one is watched too");
  assert.deepEqual(b.gaveUp, []);
});

test("a crash loop gives up: the launcher stops everything, exit 1", async () => {
  const b = bed();
  b.first.end({ code: 1, signal: null });
  await sleep(30);
  b.started[0]!.end({ code: 1, signal: null });
  await sleep(50);
  b.started[1]!.end({ code: 1, signal: null });
  await sleep(50);
  assert.equal(b.started.length, 2, "not started a third time");
  assert.deepEqual(b.gaveUp, [["the worker (pid 3) exited with code 1; it ended 3 times within 60 s", 1]]);
});

test("a refused configuration (exit 2) is not retried: exit 2; unless the child's exit codes mean no such thing", async () => {
  const b = bed();
  b.first.end({ code: 2, signal: null });
  await sleep(30);
  assert.equal(b.started.length, 0);
  assert.deepEqual(b.gaveUp, [["the worker refused its configuration (above)", 2]]);
  const redis = bed({ configExits: false });
  redis.first.end({ code: 2, signal: null });
  await sleep(30);
  assert.equal(redis.started.length, 1);
});

test("a refused configuration the launcher's check refuses too: the others keep running, it is started again once the check passes (not a crash)", async () => {
  let problem: string | null = "claimwatch.yaml:3: rebuildz: unknown key";
  let stamp = "v1";
  const b = bed({ stamp: () => stamp, problem: () => problem });
  b.first.end({ code: 2, signal: null });
  await sleep(40);
  assert.deepEqual(b.gaveUp, [], "nothing else is stopped");
  assert.equal(b.started.length, 0, "not started again while the check refuses");
  assert.equal(
    b.lines[0],
    "the worker refused its configuration (above): claimwatch.yaml:3: rebuildz: unknown key; everything else keeps running: fix claimwatch.yaml, and the worker is started again once it loads",
  );
  problem = null;
  stamp = "v2";
  await sleep(40);
  assert.equal(b.started.length, 1);
  assert.equal(b.lines[1], "claimwatch.yaml loads now: starting the worker again");
  // Refused again, more often than the crash budget allows: still waiting, never given up on.
  for (let i = 0; i < 4; i++) {
    problem = "bad again";
    b.started[b.started.length - 1]!.end({ code: 2, signal: null });
    await sleep(20);
    problem = null;
    await sleep(40);
  }
  assert.equal(b.started.length, 5);
  assert.deepEqual(b.gaveUp, []);
  // A stop while it waits: nothing starts after it.
  problem = "bad";
  b.started[4]!.end({ code: 2, signal: null });
  await sleep(20);
  b.stop();
  await b.supervised.stop(1_000);
  problem = null;
  await sleep(40);
  assert.equal(b.started.length, 5, "nothing started after the stop");
});

test("a refusal the launcher's check does not share (the host's containment, the environment) stops everything, exit 2; unless the file was fixed since the child started", async () => {
  let stamp = "v1";
  const b = bed({ stamp: () => stamp });
  b.first.end({ code: 2, signal: null });
  await sleep(30);
  assert.equal(b.started.length, 0);
  assert.deepEqual(b.gaveUp, [["the worker refused its configuration (above)", 2]]);
  // Fixed between the child's read and its exit: started again once.
  const c = bed({ stamp: () => stamp });
  stamp = "v2";
  c.first.end({ code: 2, signal: null });
  await sleep(30);
  assert.equal(c.started.length, 1);
  assert.deepEqual(c.gaveUp, []);
  assert.match(c.lines[0]!, /changed since it started and loads now: starting it again$/);
});

test("a start that fails counts as another end, named as such", async () => {
  const b = bed({ failStarts: 1 });
  b.first.end({ code: null, signal: "SIGKILL" });
  await sleep(80);
  assert.match(
    b.lines[1]!,
    /^the worker could not be started again \(spawn EAGAIN\); starting it again in 0\.01 s \(restart 2\)$/,
  );
  assert.equal(b.started.length, 1);
});

test("once the launcher stops, an end is expected: a restart that is due is cancelled; stop() stops the child", async () => {
  const b = bed();
  b.first.end({ code: null, signal: "SIGKILL" });
  b.stop();
  await b.supervised.stop(1_000);
  await sleep(30);
  assert.equal(b.started.length, 0, "nothing started after the stop");
  const c = bed();
  c.stop();
  await c.supervised.stop(1_000);
  assert.equal(c.first.stopped, true);
  assert.deepEqual(c.lines, [], "its end during the stop is not a crash");
});
