/**
 * Attempts nobody will finish: their worker died (or was paused past its heartbeat) and no next
 * attempt came to close them — BullMQ failed the job after its stall limit, the job was removed,
 * the queue drained. Every worker sweeps on its heartbeat: a queued or running record whose
 * worker has no live heartbeat (expired on the Redis clock) is closed as aborted, in one script
 * that re-checks both at the moment of the write. A worker also closes its own records whose job
 * it no longer runs: an attempt whose final write failed (Redis away or out of memory at that
 * moment) would otherwise stay running as long as the worker lives, unless its job ran again.
 * A worker judges others only once its own beats have come for a heartbeat TTL with no gap
 * (BEAT_STREAK, checked by RUN_ABANDON on the sweeper's heartbeat): after a write outage every
 * heartbeat has expired, live or not. A sweep without a sweeping worker (tests, tools) asks no
 * streak.
 */
import type { Redis } from "ioredis";
import { RUN_REPLY } from "../redis/replies";
import { queueVariadicScript, runVariadicScript, scriptPipeline } from "../redis/scripts";
import { indexLayout, proofArg, PUBLISHING_FIELD, runPlaceOf, NOT_ASKED, UNPROVEN, type PublishProof } from "./records";
import { RUN_ABANDON } from "./scripts";
import { timelineSpec } from "./timeline-counters";
import type { RunRef, RunStore, WriteResult } from "./writer";
import { BEAT_STREAK } from "../workers/heartbeat";

/** The statuses an abandoned run moves between. */
const ABANDON_STATUSES = ["queued", "running", "aborted"] as const;

/**
 * Closes `run` as aborted if it is still queued or running (whoever ran it), unless it passed its
 * check before a publish and its worker still beats (it may have published: it ends it itself).
 * With a proven `proof` of its publish it ends rebuilt; with an unknown one, a record that was
 * about to publish is left alone until PROOF_PATIENCE_MS after its check (the sweep asks again);
 * not asked, it is left alone (the sweep asks once its worker is gone).
 */
export async function abandonRun(
  store: RunStore,
  run: RunRef,
  reason: string,
  proof: PublishProof = UNPROVEN,
): Promise<boolean> {
  const { keys } = store;
  const layout = indexLayout(keys, run, proof.kind === "proven" ? [...ABANDON_STATUSES, "rebuilt"] : ABANDON_STATUSES);
  // A proven close records its fence in its lane: the record's idempotency key (its version's
  // mark, which another version's is told from), read only then (rare).
  const lane = provenLane(
    keys,
    run.runId,
    proof,
    proof.kind === "proven" ? await store.client.hget(keys.run(run.runId), "idempotencyKey") : null,
  );
  const reply = await runVariadicScript(
    store.client,
    RUN_ABANDON,
    [
      keys.run(run.runId),
      keys.runOpenAttempt(run.jobId),
      keys.run(run.runId),
      keys.metricsCounters,
      keys.run(run.runId),
      keys.events,
      keys.workerRegistry,
      ...lane.keys,
    ],
    layout.keys,
    [
      run.runId,
      layout.n,
      reason,
      "",
      layout.statuses,
      timelineSpec(keys, run, store.retention),
      "",
      keys.workerHeartbeatPrefix,
      "",
      "",
      proofArg(proof),
      lane.ttlMs,
    ],
  );
  return reply === RUN_REPLY.written;
}

/**
 * The lane a close proven by `proof` records its fence in (RUN_ABANDON KEYS[8], KEYS[9],
 * ARGV[12]): its version's idempotency key (left as it is) and the lane HASH of the output the
 * proof names; the record's own key in their place (none) when not proven, or when the record has
 * no idempotency key (a forced rebuild).
 */
function provenLane(
  keys: RunStore["keys"],
  runId: string,
  proof: PublishProof,
  idempotencyKey: string | null | undefined,
): { keys: [string, string]; ttlMs: number | "" } {
  const none = keys.run(runId);
  if (proof.kind !== "proven" || !proof.idempotencyTtlMs || !idempotencyKey) return { keys: [none, none], ttlMs: "" };
  return {
    keys: [keys.idempotency(idempotencyKey), proof.lane ? keys.rebuiltNow(proof.lane) : none],
    ttlMs: proof.idempotencyTtlMs,
  };
}

/** In-flight records looked at per sweep and status (the running index holds only runs in flight). */
export const SWEEP_BATCH = 200;

/**
 * Where the next sweep reads each in-flight index: a page of SWEEP_BATCH after the last one, back
 * to the start after a short page. With more runs in flight than a page, the sweeps go through
 * the whole index, a page per beat. Pages are by position (index scores are start times): runs
 * that start or end meanwhile shift the others, so a record can fall just behind the cursor for
 * a round; it is read in the next one.
 */
export interface SweepCursor {
  running: number;
  queued: number;
}

/** The sweeping worker itself: its records whose job it no longer runs are closed too. */
export interface SweepingWorker {
  workerId: string;
  /** The jobs it runs now (asked after the records are read: a job started meanwhile is kept). */
  activeJobIds: () => Iterable<string>;
  /**
   * False while its own beat streak is shorter than a heartbeat TTL (its last beat's answer,
   * BEAT_STREAK in lib/workers/heartbeat.ts): then only its own records are looked at. RUN_ABANDON
   * checks the streak again when it writes.
   */
  judgesOthers?: boolean;
  /** Kept by the sweeping worker from one sweep to the next; without, every sweep reads the first page. */
  cursor?: SweepCursor;
  /**
   * Sends again the final write the sweeper sent lately for one of its own runs (writer.ts
   * `resendFinalWrite`), or null when it has none: a main Redis that lost the write brought the
   * record back in flight, and the attempt's own ending, not "aborted", is what happened.
   */
  resendFinal?: (runId: string) => Promise<WriteResult | null>;
  /**
   * Whether `run` published (lib/rebuilds/published-by-run.ts), asked only for a record about to
   * be closed that was about to publish. Proven: only its final write was lost, and it is closed
   * rebuilt, naming its build, not aborted ("may be published"). Unknown: left for a later sweep,
   * until PROOF_PATIENCE_MS after its check before the publish (records.ts).
   */
  publishedBy?: (run: { runId: string; rebuild: string | null; tenant: string | null }) => Promise<PublishProof>;
}

/**
 * One sweep: three round trips (the in-flight run ids, their records' workers, then one script
 * per record whose worker looks gone, or is `self` and no longer runs its job). Returns the run
 * ids closed.
 */
export async function closeAbandonedRuns(
  store: RunStore & { client: RunStore["client"] & Pick<Redis, "zrange" | "pipeline"> },
  self?: SweepingWorker,
): Promise<string[]> {
  const { client, keys } = store;
  const statuses = ["running", "queued"] as const;
  // The pages are read from where the cursor stood now, and it moves on from there only once
  // this sweep is done: a sweep that fails reads its pages again next time.
  const from: SweepCursor = { running: self?.cursor?.running ?? 0, queued: self?.cursor?.queued ?? 0 };
  const inFlight = client.pipeline();
  for (const status of statuses) {
    inFlight.zrange(keys.runIndex({ status }), String(from[status]), String(from[status] + SWEEP_BATCH - 1));
  }
  const pages = ((await inFlight.exec()) ?? []).map(([error, members]) => {
    if (error) throw error;
    return members as string[];
  });
  const moveOn = () => {
    if (!self?.cursor) return;
    statuses.forEach((status, i) => {
      self.cursor![status] = pages[i]!.length === SWEEP_BATCH ? from[status] + SWEEP_BATCH : 0;
    });
  };
  const ids = pages.flat();
  if (ids.length === 0) {
    moveOn();
    return [];
  }
  const lookup = client.pipeline();
  for (const id of ids)
    lookup.hmget(keys.run(id), "workerId", "jobId", "rebuild", "tenant", PUBLISHING_FIELD, "idempotencyKey");
  const replies = (await lookup.exec()) ?? [];
  const active = new Set(self?.activeJobIds() ?? []);
  // Its own runs whose job it no longer runs, and whose final write it sent: sent again (a Redis
  // that lost it), and closed that way rather than aborted. Any other answer: the sweep goes on.
  // A resend that failed (a Redis error, likeliest right after a failover) leaves the record for
  // the next sweep: the write is kept, and aborting it now would say what did not happen.
  const resent = new Set<string>();
  if (self?.resendFinal) {
    const resend = self.resendFinal;
    await Promise.all(
      ids.map(async (runId, i) => {
        const [workerId, jobId] = (replies[i]?.[1] as (string | null)[] | undefined) ?? [];
        if (workerId !== self.workerId || !jobId || active.has(jobId)) return;
        const result = await resend(runId).catch(() => "failed" as const);
        if (result === "written" || result === "final" || result === "failed") resent.add(runId);
      }),
    );
  }
  // Whether the records about to be closed that were about to publish did (published-by-run.ts),
  // asked only once their worker is gone (another's) or no longer runs their job (its own): never
  // while a live publisher may still be writing its own fence record beside it.
  const closes = (workerId: string, jobId: string) => {
    const mine = workerId === self?.workerId;
    return mine ? !active.has(jobId) : self?.judgesOthers !== false;
  };
  const marked = ids
    .map((runId, i) => {
      const [workerId, jobId, rebuild, tenant, publishing] = (replies[i]?.[1] as (string | null)[] | undefined) ?? [];
      return { runId, workerId, jobId, rebuild, tenant, publishing };
    })
    .filter(
      (r): r is typeof r & { workerId: string; jobId: string; publishing: string } =>
        !!r.workerId && !!r.jobId && !!r.publishing && !resent.has(r.runId) && closes(r.workerId, r.jobId),
    );
  const proofs = new Map<string, PublishProof>();
  if (self?.publishedBy && marked.length > 0) {
    const publishedBy = self.publishedBy;
    const liveness = client.pipeline();
    for (const r of marked) liveness.exists(keys.workerHeartbeat(r.workerId));
    const answers = (await liveness.exec()) ?? [];
    await Promise.all(
      marked.map(async (r, i) => {
        const beating = answers[i]?.[1] === 1;
        // Its worker beats: RUN_ABANDON leaves it; should the beat expire meanwhile, not asked keeps
        // it for the next sweep to ask (closed now without the proof, it would say aborted).
        if (beating && r.workerId !== self.workerId) return proofs.set(r.runId, NOT_ASKED);
        const proof = await publishedBy({ runId: r.runId, rebuild: r.rebuild ?? null, tenant: r.tenant ?? null }).catch(
          (): PublishProof => ({ kind: "unknown" }),
        );
        // A proof of another publish than the record's mark is told apart by RUN_ABANDON itself.
        proofs.set(r.runId, proof);
      }),
    );
  }
  const pipeline = scriptPipeline(client, [RUN_ABANDON]);
  const queued: string[] = [];
  ids.forEach((runId, i) => {
    const [workerId, jobId, rebuild, tenant, , idempotencyKey] =
      (replies[i]?.[1] as (string | null)[] | undefined) ?? [];
    if (!workerId || !jobId || resent.has(runId) || !closes(workerId, jobId)) return;
    const mine = workerId === self?.workerId;
    // Unknown: RUN_ABANDON leaves it for a later sweep, until PROOF_PATIENCE_MS after its check.
    const proof = proofs.get(runId) ?? UNPROVEN;
    const lane = provenLane(keys, runId, proof, idempotencyKey);
    const layout = indexLayout(
      keys,
      runPlaceOf(rebuild, tenant),
      proof.kind === "proven" ? [...ABANDON_STATUSES, "rebuilt"] : ABANDON_STATUSES,
    );
    queueVariadicScript(
      pipeline,
      RUN_ABANDON,
      [
        keys.run(runId),
        keys.runOpenAttempt(jobId),
        keys.workerHeartbeat(workerId),
        keys.metricsCounters,
        self ? keys.workerHeartbeat(self.workerId) : keys.run(runId),
        keys.events,
        keys.workerRegistry,
        ...lane.keys,
      ],
      layout.keys,
      [
        runId,
        layout.n,
        mine
          ? `worker ${workerId} no longer runs this attempt, and its final record was not written (Redis refused or lost the write)`
          : `worker ${workerId} stopped beating (died or paused) before this attempt ended`,
        workerId,
        layout.statuses,
        timelineSpec(keys, runPlaceOf(rebuild, tenant), store.retention),
        mine ? "1" : "",
        keys.workerHeartbeatPrefix,
        self ? BEAT_STREAK.requiredMs : "",
        BEAT_STREAK.freshMs,
        proofArg(proof),
        lane.ttlMs,
      ],
    );
    queued.push(runId);
  });
  if (queued.length === 0) {
    moveOn();
    return [];
  }
  const results = (await pipeline.exec()) ?? [];
  moveOn();
  return queued.filter((_, i) => results[i]?.[1] === RUN_REPLY.written);
}
