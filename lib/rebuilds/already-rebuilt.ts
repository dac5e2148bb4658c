/**
 * The repeat of a version already rebuilt — the common duplicate of an at-least-once queue — in
 * one round trip: the idempotency check, the "skipped" run record and the clearing of the job's
 * "waiting trigger" marker are one script (SKIP_IF_REBUILT). It takes no claim: a repeat that
 * writes no output has nothing to guard. A version not rebuilt yet goes on to the claim.
 */
import type { Redis } from "ioredis";
import { publishEvent } from "../events/publish";
import type { RedisKeys } from "../redis/keys";
import { runVariadicScript, SKIP_IF_REBUILT } from "../redis/scripts";
import { indexKeys, recordTtlMs, statusIndexKeys, toFields, type RunRetention } from "../runs/records";
import type { RunRecord } from "../runs/types";
import type { RebuildJobData } from "./queue";

/** The record's reason, as `finishSkipped` words it; the script appends the run id. */
const REASON_PREFIX = "already-rebuilt: already rebuilt by run ";

/**
 * Writes `record` as skipped "already-rebuilt" if the idempotency key `idempotencyKey` exists
 * and returns the run id that rebuilt the version; otherwise writes nothing and returns null.
 * Either way the job's waiting-trigger marker is dropped if it is still this job's.
 */
export async function skipIfAlreadyRebuilt(
  client: Pick<Redis, "defineCommand">,
  keys: RedisKeys,
  job: { id: string; data: RebuildJobData },
  idempotencyKey: string,
  record: Pick<RunRecord, "id" | "rebuild" | "tenant" | "createdAt"> & Partial<RunRecord>,
  retention: RunRetention,
): Promise<string | null> {
  const runIndexes = indexKeys(keys, record.rebuild, record.tenant);
  const fields = Object.entries(toFields({ ...record, status: "skipped" })).flat();
  const reply = await runVariadicScript(
    client,
    SKIP_IF_REBUILT,
    [
      keys.idempotency(idempotencyKey),
      keys.pendingTrigger(job.data.rebuild, job.data.tenant, job.data.version, job.data.force),
      keys.run(record.id),
    ],
    [...runIndexes, ...statusIndexKeys(keys, record.rebuild, record.tenant, "skipped")],
    [job.id, record.id, record.createdAt, runIndexes.length, recordTtlMs(retention), REASON_PREFIX, ...fields],
  );
  if (typeof reply !== "string") return null;
  // The script wrote the skipped record; its live event follows (lib/events, fire-and-forget).
  void publishEvent(client, keys, { type: "run", run: { ...record, status: "skipped" } });
  return reply;
}
