/**
 * An output whose `current` lags behind its published build because repair keeps failing there
 * (every swap or fence record refused by a failing disk): the run that published said so once in
 * its log, and only the worker's log said it after that (black-box helper-116). Each worker's
 * repair records what it found for its host's outputs; the health report (the dashboard's banner,
 * `claimwatch status`) names every output still lagging.
 */
import os from "node:os";
import type { Redis } from "ioredis";
import type { RedisKeys } from "../redis/keys";
import { formatAbsolute } from "../time-text";

/**
 * What repair found for one output: following its published build, or lagging (why; `checked`
 * false: the disk failed before `current` could even be read).
 */
export type CurrentLagOutcome =
  | { outputDir: string; lag: null }
  | { outputDir: string; lag: { reason: string; fence: number; build: string; checked: boolean } };

interface LagEntry {
  outputDir: string;
  host: string;
  since: number;
  at: number;
  reason: string;
  fence: number;
  build: string;
  checked?: boolean;
}

/** An entry not seen again this long (its worker stopped, or the output was removed) is not shown. */
export const LAG_SEEN_WITHIN_MS = 2 * 60_000;
/** ... and removed after this long (a host renamed, an output no longer defined): the HASH stays small. */
export const LAG_FORGOTTEN_AFTER_MS = 10 * LAG_SEEN_WITHIN_MS;

const fieldOf = (host: string, outputDir: string) => `${host} ${outputDir}`;

/**
 * Records one repair pass's outcomes (at `now`, on the claims Redis clock), and forgets entries
 * nobody saw for LAG_FORGOTTEN_AFTER_MS: two round trips (the HASH read, then its changes).
 */
export async function recordCurrentLag(
  client: Pick<Redis, "hgetall" | "hset" | "hdel">,
  keys: RedisKeys,
  outcomes: readonly CurrentLagOutcome[],
  now: number,
  host = os.hostname(),
): Promise<void> {
  const known = await client.hgetall(keys.currentLagging);
  const following = outcomes.filter((o) => o.lag === null).map((o) => fieldOf(host, o.outputDir));
  const forgotten = Object.entries(known)
    .filter(([, raw]) => {
      const entry = parse(raw);
      return !entry || now - entry.at > LAG_FORGOTTEN_AFTER_MS;
    })
    .map(([field]) => field);
  const gone = [...new Set([...following, ...forgotten])].filter((field) => field in known);
  const writes: Promise<unknown>[] = [];
  if (gone.length > 0) writes.push(client.hdel(keys.currentLagging, ...gone));
  for (const outcome of outcomes) {
    if (outcome.lag === null) continue;
    const { outputDir, lag } = outcome;
    const field = fieldOf(host, outputDir);
    // Lagging since it was first seen lagging, through publishes it could not follow either.
    const since = parse(known[field])?.since ?? now;
    const entry: LagEntry = { outputDir, host, since, at: now, ...lag };
    writes.push(client.hset(keys.currentLagging, field, JSON.stringify(entry)));
  }
  await Promise.all(writes);
}

function parse(raw: string | null | undefined): LagEntry | null {
  if (!raw) return null;
  try {
    const entry = JSON.parse(raw) as Partial<LagEntry>;
    return typeof entry.outputDir === "string" && typeof entry.since === "number" && typeof entry.at === "number"
      ? (entry as LagEntry)
      : null;
  } catch {
    return null;
  }
}

/** Banner lines for outputs whose `current` lags (seen within LAG_SEEN_WITHIN_MS of `now`, the claims Redis clock). */
export async function currentLagProblems(
  client: Pick<Redis, "hgetall">,
  keys: RedisKeys,
  now: number,
): Promise<string[]> {
  const entries = Object.values(await client.hgetall(keys.currentLagging))
    .map(parse)
    .filter((entry): entry is LagEntry => entry !== null && now - entry.at <= LAG_SEEN_WITHIN_MS)
    .sort((a, b) => a.since - b.since);
  return entries.map((e) => {
    const since = formatAbsolute(e.since, "utc");
    return e.checked === false
      ? `${e.outputDir}/current on ${e.host} cannot be checked against the published ${e.build} (fence ${e.fence}) since ${since}: ${e.reason}; check that disk (dmesg), repair moves current once it works`
      : `${e.outputDir}/current on ${e.host} still serves an older build than the published ${e.build} (fence ${e.fence}) since ${since}: repair fails there (${e.reason}); check that disk (dmesg), repair moves current once it works`;
  });
}
