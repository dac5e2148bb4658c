/**
 * The soak's stream of triggers over every (rebuild, tenant), with deliberate duplicates:
 *
 *   new         the next version of that output
 *   again       the newest version once more (sometimes twice in a row)
 *   mid-run     the version a run is building right now (read from the running-runs index)
 *   redeliver   the same job data added straight to the queue under a new job id: what a
 *               broker's second delivery of one message looks like (no trigger dedup)
 *   force       the newest version with `force` (skips "already rebuilt", never the claim):
 *               the same bytes again, so the same content-addressed build
 *   back        an older version again (a caller rolling the output back to what it served
 *               before: A → B → A); from then on `again`, `force` and `redeliver` repeat it,
 *               until the next `new`. Only for rebuilds whose versions the caller names.
 *
 * "The newest version" below is the one asked for last (`new` or `back`).
 * A rebuild with `hashedInputs` is triggered without a version: `new` first rewrites its input
 * file with the next version (an event `inputs` maps that content's hash to it), every mode sends
 * no version (the job reads whatever the input holds by then), except mid-run, which names the
 * running run's version (a hash) explicitly. Its trigger events carry the version the input held
 * when the trigger was sent and `hashed: true`: the job must read that version or a newer one.
 *
 * Every accepted trigger is an event `trigger` with its job id; the checker accounts for each.
 * `expose` hands the chaos a way to ask for the next version of one output at once (after a
 * force release: the operator who frees a claim usually wants the newest version built now).
 */
import crypto from "node:crypto";
import fs from "node:fs";
import type { Queue } from "bullmq";
import type { Redis } from "ioredis";
import type { RedisKeys } from "../../lib/redis/keys";
import type { Definitions } from "../../lib/rebuilds/definitions";
import { jobOptionsFor, type RebuildJobData } from "../../lib/rebuilds/queue";
import { triggerRebuild, type TriggerRequest, type TriggerResult } from "../../lib/rebuilds/trigger";
import { hashInputs } from "../../lib/rebuilds/version";
import { acknowledgedReplicas, connectionEpoch } from "../../lib/redis/replicas";
import { readRun } from "../../lib/runs/records";
import {
  claimLabel,
  claimRefs,
  FIRST_INPUT_VERSION,
  HASHED_REBUILDS,
  sleep,
  hashedInputPaths,
  versionInputOf,
  withTimeout,
  type EventLog,
  type SoakClaimRef,
} from "./bed";

export type TriggerMode = "new" | "again" | "mid-run" | "redeliver" | "force" | "back";

export interface TriggerStreamOptions {
  queue: Queue;
  main: Redis;
  keys: RedisKeys;
  definitions: Definitions;
  events: EventLog;
  random: () => number;
  until: number;
  /** Pause between triggers, ms. */
  gapMs: [number, number];
  /** The soak's directory: where the hashed rebuilds' input files are (`versionInputOf`). */
  inputRoot: string;
  /**
   * Replicas of the main Redis that must have a trigger's job before it counts as sent
   * (`CLAIMWATCH_TRIGGER_REPLICAS`, `--redis sentinel`); fewer: a `trigger-unreplicated` event,
   * not counted (the caller was told to send it again). 0: the primary's answer.
   */
  replicas?: number;
  /** Called once at the start with a function that triggers the next version of one output now. */
  expose?: (newVersion: (ref: SoakClaimRef, why: string) => Promise<void>) => void;
}

/** A trigger not answered, or answered "not replicated", is sent again this many times, this far apart. */
const RESENDS = 6;
const RESEND_AFTER_MS = 2_000;

const MODES: [TriggerMode, number][] = [
  ["new", 0.34],
  ["again", 0.12],
  ["mid-run", 0.14],
  ["redeliver", 0.1],
  ["force", 0.1],
  // Often enough that the CI's 30 s soak asks for older versions several times (0.1 gave 0–2).
  ["back", 0.2],
];

export async function runTriggerStream(options: TriggerStreamOptions): Promise<void> {
  const { random, events } = options;
  const refs = claimRefs();
  /** Per output: the highest version asked for, and the one asked for last (lower after a `back`). */
  const newest = new Map<string, number>();
  const wanted = new Map<string, number>();
  const pick = <T>(items: T[]): T => items[Math.floor(random() * items.length)]!;
  const versionOf = (n: number) => `v${String(n).padStart(4, "0")}`;

  /**
   * Writes `version` into a hashed rebuild's input (whole, by rename) and maps its hash to it; one
   * write at a time (the chaos's `expose` runs beside the loop), so each hash is of its version.
   */
  let inputWrites: Promise<void> = Promise.resolve();
  /** The version each hashed rebuild's input holds (written, renamed into place). */
  const inputHolds = new Map<string, string>();
  const writeInput = (rebuild: string, version: string): Promise<void> => {
    const file = versionInputOf(options.inputRoot, rebuild);
    const write = inputWrites.then(async () => {
      if (version !== FIRST_INPUT_VERSION) {
        fs.writeFileSync(`${file}.tmp`, `${version}\n`);
        fs.renameSync(`${file}.tmp`, file);
      }
      inputHolds.set(rebuild, version);
      events.record("inputs", {
        rebuild,
        version,
        hash: await hashInputs(hashedInputPaths(options.inputRoot, rebuild)),
      });
    });
    inputWrites = write.catch(() => {});
    return write;
  };
  const replicas = options.replicas ?? 0;
  for (const rebuild of HASHED_REBUILDS) await writeInput(rebuild, FIRST_INPUT_VERSION);

  /**
   * One trigger. A hashed rebuild's is sent without a version unless `explicit` (mid-run): its
   * event's `version` is what the input holds now, not `version`.
   */
  const send = async (
    ref: SoakClaimRef,
    version: string,
    mode: TriggerMode,
    force = false,
    why?: string,
    explicit = false,
  ): Promise<void> => {
    const versionless = HASHED_REBUILDS.has(ref.rebuild) && !explicit;
    // When the request was first sent: an answer on a resend may come after its job published.
    const sentAt = Date.now();
    const fields = {
      sentAt,
      rebuild: ref.rebuild,
      tenant: ref.tenant ?? null,
      // What the job must read at least: the input's version now (a newer one may be on its way).
      version: versionless ? inputHolds.get(ref.rebuild)! : version,
      mode,
      force,
      ...(versionless ? { hashed: true } : {}),
      ...(why ? { why } : {}),
    };
    const sent = versionless ? {} : { version };
    try {
      if (mode === "redeliver") {
        const definition = options.definitions.rebuilds.get(ref.rebuild)!;
        const data: RebuildJobData = {
          rebuild: ref.rebuild,
          ...(ref.tenant ? { tenant: ref.tenant } : {}),
          ...sent,
          force,
          trigger: "api",
        };
        const jobId = `run-${crypto.randomUUID()}`;
        const epoch = connectionEpoch(options.main);
        await withTimeout(
          options.queue.add(ref.rebuild, data, {
            ...jobOptionsFor(definition, options.definitions.retention),
            jobId,
          }),
          20_000,
          "queue.add",
        );
        const acknowledged = await withTimeout(acknowledgedReplicas(options.main, replicas, epoch), 20_000, "WAIT");
        if (acknowledged < replicas) {
          events.record("trigger-unreplicated", { ...fields, jobId, acknowledged });
          return;
        }
        events.record("trigger", { ...fields, status: "queued", jobId });
        return;
      }
      // As a caller told "not replicated" (or left without an answer) does: the same request,
      // with the same request id, sent again a few times — what REQUEST_ID_RENAME and the
      // deduplicated answer's WAIT are for, under the failovers of `--redis sentinel`.
      const request: TriggerRequest = {
        ...sent,
        force,
        trigger: "api",
        ...(ref.tenant ? { tenant: ref.tenant } : {}),
        replicas,
        requestId: `soak-${crypto.randomUUID()}`,
      };
      for (let resend = 0; ; resend++) {
        const last = resend === RESENDS || Date.now() > options.until;
        const again = resend > 0 ? { resend } : {};
        let result: TriggerResult;
        try {
          result = await withTimeout(
            triggerRebuild(options.queue, options.main, options.keys, options.definitions, ref.rebuild, request),
            20_000,
            "trigger",
          );
        } catch (error) {
          if (last) throw error;
          events.record("trigger-resent", { ...fields, ...again, error: String(error) });
          await sleep(RESEND_AFTER_MS);
          continue;
        }
        if (result.status === "queued" || result.status === "deduplicated") {
          events.record("trigger", { ...fields, ...again, status: result.status, jobId: result.jobId });
        } else if (result.status !== "not-replicated") {
          events.record("trigger-refused", {
            ...fields,
            status: result.status,
            message: "message" in result ? result.message : "",
          });
        } else if (last) {
          events.record("trigger-unreplicated", { ...fields, jobId: result.jobId, acknowledged: result.acknowledged });
        } else {
          events.record("trigger-resent", {
            ...fields,
            ...again,
            jobId: result.jobId,
            acknowledged: result.acknowledged,
          });
          await sleep(RESEND_AFTER_MS);
          continue;
        }
        return;
      }
    } catch (error) {
      // Not accepted as far as the caller can tell (Redis down past the timeout): not counted.
      events.record("trigger-error", { ...fields, error: String(error) });
    }
  };

  /** The next version of `ref`: a hashed rebuild's input holds it before the trigger is sent. */
  const sendNew = async (ref: SoakClaimRef, why?: string): Promise<void> => {
    const next = (newest.get(claimLabel(ref)) ?? 0) + 1;
    newest.set(claimLabel(ref), next);
    wanted.set(claimLabel(ref), next);
    if (HASHED_REBUILDS.has(ref.rebuild)) await writeInput(ref.rebuild, versionOf(next));
    await send(ref, versionOf(next), "new", false, why);
  };

  options.expose?.((ref, why) => sendNew(ref, why));

  while (Date.now() < options.until) {
    let roll = random();
    let mode: TriggerMode = "new";
    for (const [candidate, weight] of MODES) {
      if (roll < weight) {
        mode = candidate;
        break;
      }
      roll -= weight;
    }
    // `back` goes to an output whose versions the caller names and that has an older one to ask for.
    const backable = refs.filter((r) => !HASHED_REBUILDS.has(r.rebuild) && (newest.get(claimLabel(r)) ?? 0) >= 2);
    const ref = mode === "back" && backable.length > 0 ? pick(backable) : pick(refs);
    const label = claimLabel(ref);
    const latest = wanted.get(label);
    const highest = newest.get(label) ?? 0;
    if (mode === "back" && (HASHED_REBUILDS.has(ref.rebuild) || highest < 2)) mode = "again";
    if (mode === "new" || latest === undefined) {
      await sendNew(ref);
    } else if (mode === "back") {
      // Mostly the version before the newest (A → B → A), sometimes any older one.
      const older = random() < 0.6 ? highest - 1 : 1 + Math.floor(random() * (highest - 1));
      wanted.set(label, older);
      await send(ref, versionOf(older), "back");
    } else if (mode === "again") {
      await send(ref, versionOf(latest), "again");
      if (random() < 0.3) await send(ref, versionOf(latest), "again");
    } else if (mode === "force") {
      await send(ref, versionOf(latest), "force", true);
    } else if (mode === "redeliver") {
      await send(ref, versionOf(latest), "redeliver");
    } else {
      const running = await runningRun(options).catch(() => null);
      if (running)
        await send(
          { rebuild: running.rebuild, tenant: running.tenant },
          running.version,
          "mid-run",
          false,
          undefined,
          true,
        );
      else await send(ref, versionOf(latest), "again");
    }
    const [low, high] = options.gapMs;
    await sleep(low + random() * (high - low));
  }
}

/** A run that is building right now, if any (a re-trigger of its version arrives mid-run). */
async function runningRun(
  options: Pick<TriggerStreamOptions, "main" | "keys" | "random">,
): Promise<{ rebuild: string; tenant: string | undefined; version: string } | null> {
  const ids = await withTimeout(
    options.main.zrange(options.keys.runIndex({ status: "running" }), "0", "-1"),
    2_000,
    "running runs",
  );
  if (ids.length === 0) return null;
  const id = ids[Math.floor(options.random() * ids.length)]!;
  const run = await withTimeout(readRun(options.main, options.keys, id), 2_000, "run record");
  if (!run || run.status !== "running" || !run.version) return null;
  return { rebuild: run.rebuild, tenant: run.tenant ?? undefined, version: run.version };
}
