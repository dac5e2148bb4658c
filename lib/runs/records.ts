/**
 * Run records in the main Redis: a HASH per attempt, a capped LIST of log lines, and ZSET
 * indexes newest-first — global, per rebuild, per rebuild and tenant, and each of these per
 * status — so every listing is O(page). This file knows the record's fields, keys, index layout
 * and retention; `writer.ts`, `trim.ts` and `abandoned.ts` write through the scripts in
 * `scripts.ts`, which enforce the status transitions. Nothing outside `lib/runs/` writes a record.
 */
import type { Redis } from "ioredis";
import { isName } from "../names";
import type { RedisKeys } from "../redis/keys";
import { RUN_STATUSES, type RunRecord, type RunStatus, type StepRecord } from "./types";

/**
 * The record field an attempt's owner check before its publish writes: "<fence> <build hash>".
 * While its worker beats, nobody else closes that record (scripts.ts, mayHavePublished).
 */
export const PUBLISHING_FIELD = "publishing";
/** How the reason of a run skipped because its version was already rebuilt (the output serves it) begins. */
export const ALREADY_REBUILT_REASON = "already-rebuilt:";
/** The value of PUBLISHING_FIELD for a publish of `buildHash` with `fence`. */
export const publishingMark = (publishing: { fence: number; buildHash: string }) =>
  `${publishing.fence} ${publishing.buildHash}`;
/**
 * A publish that took, as the record scripts take it from whoever closes a record for its attempt
 * (lib/rebuilds/published-by-run.ts): its publishing mark, then when it was published (ms, the
 * claims Redis's clock): "<fence> <build> <publishedAt>".
 */
export const publishedProof = (published: { fence: number; buildHash: string; publishedAt: number }) =>
  `${publishingMark(published)} ${Math.round(published.publishedAt)}`;
/**
 * Whether a run whose record someone else than its attempt closes published
 * (lib/rebuilds/published-by-run.ts): `proven` (closed rebuilt), `unproven` (no such publish, or
 * none provable here: closed aborted, "that build may be published"), or `unknown` (the claims
 * Redis or the output's disk did not answer, or failed: a record that was about to publish is
 * left to a later sweep).
 */
export type PublishProof =
  /**
   * `idempotencyTtlMs`: the rebuild's idempotency TTL: a close it proves records its fence in its
   * lane (kept at least that long), so that an older publish's late final write marks nothing.
   * `lane`: the output's claim name (keys.rebuiltNow).
   */
  | { kind: "proven"; proof: string; idempotencyTtlMs?: number; lane?: string }
  | { kind: "unproven" }
  | { kind: "unknown" }
  /** Not asked (its worker may be live, writing its own fence record): a marked record is left alone. */
  | { kind: "not-asked" };
export const UNPROVEN: PublishProof = { kind: "unproven" };
export const UNKNOWN: PublishProof = { kind: "unknown" };
export const NOT_ASKED: PublishProof = { kind: "not-asked" };
/**
 * How long a record that was about to publish is left running while whether it published stays
 * unknown, counted from its check before the publish (`publishingAt`, on the Redis clock, so every
 * closer counts alike): then it is closed aborted, "that build may be published".
 */
export const PROOF_PATIENCE_MS = 5 * 60_000;
/** A PublishProof as the record scripts take it: the proof, '?' unknown, '-' not asked, '' unproven. */
export function proofArg(proof: PublishProof): string {
  switch (proof.kind) {
    case "proven":
      return proof.proof;
    case "unknown":
      return "?";
    case "not-asked":
      return "-";
    case "unproven":
      return "";
  }
}
/** The record field that names an operator's force release of the attempt's claim (`forceReleasedBy`). */
export const FORCE_RELEASED_FIELD = "forceReleasedBy";
/**
 * The record field RUN_TRIM sets on an aborted record it takes out of the indexes but keeps (an
 * hour, final, for a pickup that may wake): found by its id, it is left out of a job's attempts
 * as it is out of every list.
 */
export const UNLISTED_FIELD = "unlistedAt";
/**
 * How long after that check the record is left to its attempt while its worker beats: a publish,
 * the fence record's fsyncs and the swap take seconds; an attempt stuck there longer (a hung
 * disk) is closed like a dead one, its reason naming the build it may have published.
 */
export const PUBLISHING_PROTECTED_MS = 120_000;

/**
 * Log lines kept per run: the newest, after — once lines were dropped — one line saying how many
 * (`logDroppedLine`, always the first). Kept so in Redis (`RUN_LOG_LUA`) and in a writer's
 * buffer of lines not sent yet (`keepNewestLines`).
 */
export const RUN_LOG_LINES = 500;

/** The start of the line that stands for a run log's dropped lines. */
const DROPPED_PREFIX = "… ";
const DROPPED_TAIL = " earlier lines not kept: a run log keeps its newest ";

/** The first line of a run log that dropped `count` earlier lines. */
export function logDroppedLine(count: number): string {
  return `${DROPPED_PREFIX}${count}${DROPPED_TAIL}${RUN_LOG_LINES - 1}`;
}

/** The lines a `logDroppedLine` stands for; null for any other line. */
function droppedCount(line: string | undefined): number | null {
  if (!line?.startsWith(DROPPED_PREFIX)) return null;
  const match = /^(\d+) earlier lines not kept/.exec(line.slice(DROPPED_PREFIX.length));
  return match ? Number(match[1]) : null;
}

/** `lines` cut to RUN_LOG_LINES: the newest, after one line counting what was dropped. */
export function keepNewestLines(lines: readonly string[]): string[] {
  if (lines.length <= RUN_LOG_LINES) return [...lines];
  let cut = lines.length - (RUN_LOG_LINES - 1);
  let dropped = lines.slice(0, cut).reduce((sum, line) => sum + (droppedCount(line) ?? 1), 0);
  const next = droppedCount(lines[cut]);
  if (next !== null) {
    dropped += next;
    cut += 1;
  }
  return [logDroppedLine(dropped), ...lines.slice(cut)];
}

/**
 * Lua: `appendLog(key, lines, from, to)` appends `lines[from..to]` to a run log LIST and cuts
 * it as `keepNewestLines` does.
 */
export const RUN_LOG_LUA = `
local function droppedCount(line)
  if type(line) ~= 'string' then return nil end
  return tonumber(string.match(line, '^${DROPPED_PREFIX}(%d+) earlier lines not kept'))
end
local function appendLog(key, lines, from, to)
  local length = redis.call('RPUSH', key, unpack(lines, from, to))
  if length <= ${RUN_LOG_LINES} then return end
  local cut = length - ${RUN_LOG_LINES - 1}
  local dropped = 0
  for _, line in ipairs(redis.call('LRANGE', key, 0, cut - 1)) do dropped = dropped + (droppedCount(line) or 1) end
  local nextCount = droppedCount(redis.call('LINDEX', key, cut))
  if nextCount then
    dropped = dropped + nextCount
    cut = cut + 1
  end
  redis.call('LTRIM', key, cut, -1)
  redis.call('LPUSH', key, '${DROPPED_PREFIX}' .. dropped .. '${DROPPED_TAIL}${RUN_LOG_LINES - 1}')
end
`;

export interface RunRetention {
  /** Records kept per rebuild (and per rebuild+tenant). */
  maxPerRebuild: number;
  maxAgeMs: number;
}

export const DEFAULT_RETENTION: RunRetention = { maxPerRebuild: 10_000, maxAgeMs: 30 * 86_400_000 };

/** Backstop expiry of a record and its log, renewed on every write: trimming removes them first. */
export const recordTtlMs = (retention: RunRetention) => retention.maxAgeMs + 86_400_000;

type RunClient = Pick<Redis, "hgetall" | "lrange">;

const STEP_STATUS_LETTERS = { running: "r", done: "d", failed: "f", aborted: "a" } as const;
const STEP_STATUS_OF: Record<string, StepRecord["status"]> = { r: "running", d: "done", f: "failed", a: "aborted" };
/** A step name the packed form can carry as it is (step names follow lib/names.ts; anything else is JSON). */
const PACKABLE_STEP_NAME = /^[A-Za-z0-9_.-]{1,200}$/;
const PACKED_STEP = /^([A-Za-z0-9_.-]{1,200}):([rdfa]):(-?\d{1,15}):(\d{0,15})$/;

/**
 * A record's steps as one short string: `<first start>|<name>:<status letter>:<start − first
 * start>:<duration>` per step, comma-separated (the duration empty while the step runs), e.g.
 * `1796244013849|prepare:d:0:200,work:d:200:804`. A quarter of the JSON's size, which keeps a
 * record of ten steps of short names under the Redis listpack limit for a field (`hash-max-listpack-value`,
 * 256 in the embedded Redis) — a record over it is stored as a hash table, at several times
 * the memory. Steps the form cannot carry exactly (another name, a time that is not a whole
 * millisecond) are written as JSON, which `decodeSteps` reads too (as it reads every record
 * written before this form).
 */
export function encodeSteps(steps: readonly StepRecord[]): string {
  if (steps.length === 0) return "";
  const first = steps[0]!.startedAt;
  const whole = (n: number) => Number.isSafeInteger(n);
  // Offsets and durations within the decoder's 15 digits; a status it knows (not `toString`).
  const fits = (n: number) => Number.isSafeInteger(n) && Math.abs(n) < 1e15;
  const packable = steps.every(
    (step) =>
      PACKABLE_STEP_NAME.test(step.name) &&
      Object.hasOwn(STEP_STATUS_LETTERS, step.status) &&
      whole(step.startedAt) &&
      fits(step.startedAt - first) &&
      (step.finishedAt === null ||
        (whole(step.finishedAt) && step.finishedAt >= step.startedAt && fits(step.finishedAt - step.startedAt))),
  );
  if (!packable) return JSON.stringify(steps);
  const packed = steps.map(
    (step) =>
      `${step.name}:${STEP_STATUS_LETTERS[step.status]}:${step.startedAt - first}:${step.finishedAt === null ? "" : step.finishedAt - step.startedAt}`,
  );
  return `${first}|${packed.join(",")}`;
}

/** `encodeSteps` undone (and the JSON form of older records); a field it cannot read is no steps. */
export function decodeSteps(raw: string | undefined): StepRecord[] {
  if (!raw) return [];
  if (raw.startsWith("[")) {
    try {
      const steps: unknown = JSON.parse(raw);
      return Array.isArray(steps) ? (steps as StepRecord[]) : [];
    } catch {
      return [];
    }
  }
  const bar = raw.indexOf("|");
  const first = Number(raw.slice(0, bar));
  if (bar < 1 || !Number.isSafeInteger(first)) return [];
  const steps: StepRecord[] = [];
  for (const part of raw.slice(bar + 1).split(",")) {
    const match = PACKED_STEP.exec(part);
    if (!match) return [];
    const startedAt = first + Number(match[3]);
    steps.push({
      name: match[1]!,
      status: STEP_STATUS_OF[match[2]!]!,
      startedAt,
      finishedAt: match[4] === "" ? null : startedAt + Number(match[4]),
    });
  }
  return steps;
}

/** Record fields as hash fields: null → "", steps → `encodeSteps`; undefined fields are not written. */
export function toFields(record: Partial<RunRecord>): Record<string, string> {
  const fields: Record<string, string> = {};
  for (const [key, value] of Object.entries(record)) {
    if (value === undefined) continue;
    fields[key] = key === "steps" ? encodeSteps(value as StepRecord[]) : value === null ? "" : String(value);
  }
  return fields;
}

/** `toFields` as a flat field/value list (script ARGV). */
export function fieldPairs(record: Partial<RunRecord>): string[] {
  return Object.entries(toFields(record)).flat();
}

const num = (raw: string | undefined) => (raw === undefined || raw === "" ? null : Number(raw));
const str = (raw: string | undefined) => (raw === undefined || raw === "" ? null : raw);

export function fromFields(hash: Record<string, string>): RunRecord | null {
  if (!hash.id) return null;
  const steps = decodeSteps(hash.steps);
  return {
    id: hash.id,
    jobId: hash.jobId ?? "",
    attempt: Number(hash.attempt ?? 0),
    rebuild: hash.rebuild ?? "",
    tenant: str(hash.tenant),
    version: str(hash.version),
    status: (hash.status ?? "queued") as RunStatus,
    reason: str(hash.reason),
    trigger: (hash.trigger ?? "api") as RunRecord["trigger"],
    workerId: str(hash.workerId),
    host: str(hash.host),
    createdAt: Number(hash.createdAt ?? 0),
    startedAt: num(hash.startedAt),
    finishedAt: num(hash.finishedAt),
    durationMs: num(hash.durationMs),
    fence: num(hash.fence),
    buildHash: str(hash.buildHash),
    idempotencyKey: str(hash.idempotencyKey),
    progress: Number(hash.progress ?? 0),
    steps,
    retryOf: str(hash.retryOf),
    madeCurrentLater: madeCurrentLaterOf(hash[MADE_CURRENT_LATER_FIELD]),
    ...(hash.closedAt ? { closedAt: Number(hash.closedAt) } : {}),
  };
}

/** The record field of `madeCurrentLater`: "<fence> <build hash> <ms>" (RUN_NOTE_MADE_CURRENT). */
export const MADE_CURRENT_LATER_FIELD = "madeCurrentLater";
function madeCurrentLaterOf(raw: string | undefined): RunRecord["madeCurrentLater"] {
  const match = /^(\d+) (\S+) (\d+)$/.exec(raw ?? "");
  return match ? { fence: Number(match[1]), buildHash: match[2]!, at: Number(match[3]) } : null;
}

/** Where a run is listed: with a rebuild of null (a job whose data named no valid rebuild) only in the global indexes. */
export interface RunPlace {
  rebuild: string | null;
  tenant: string | null;
}

/** The place of a run from what its record (or job) says; derived the same way by every writer. */
export function runPlaceOf(rebuild: unknown, tenant: unknown): RunPlace {
  const indexed = isName(rebuild) ? rebuild : null;
  return { rebuild: indexed, tenant: indexed && isName(tenant) ? tenant : null };
}

/**
 * The index keys a run script takes: the run's `n` base indexes, then `n` for each status in
 * `statuses` (the ones the script may move the run into or out of; all of them by default).
 * `statuses` goes to the script too (ARGV), so it finds each status's keys.
 */
export function indexLayout(
  keys: RedisKeys,
  place: RunPlace,
  statuses: readonly RunStatus[] = RUN_STATUSES,
): { n: number; statuses: string; keys: string[] } {
  const filters: { rebuild?: string; tenant?: string }[] = [{}];
  if (place.rebuild) {
    filters.push({ rebuild: place.rebuild });
    if (place.tenant) filters.push({ rebuild: place.rebuild, tenant: place.tenant });
  }
  const unique = [...new Set(statuses)];
  const list = filters.map((filter) => keys.runIndex(filter));
  for (const status of unique) for (const filter of filters) list.push(keys.runIndex({ ...filter, status }));
  return { n: filters.length, statuses: unique.join(","), keys: list };
}

export async function readRun(client: RunClient, keys: RedisKeys, runId: string): Promise<RunRecord | null> {
  return fromFields(await client.hgetall(keys.run(runId)));
}

export async function readRunLog(
  client: RunClient,
  keys: RedisKeys,
  runId: string,
  tail = RUN_LOG_LINES,
): Promise<string[]> {
  return client.lrange(keys.runLog(runId), -tail, -1);
}

/** When a run finished (ms, Redis clock), or null. */
export async function readRunFinishedAt(
  client: Pick<Redis, "hget">,
  keys: RedisKeys,
  runId: string,
): Promise<number | null> {
  const raw = await client.hget(keys.run(runId), "finishedAt");
  return raw ? Number(raw) : null;
}
