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

/** What repair found for one output: following its published build, lagging (why), or not known. */
export type CurrentLagOutcome =
  { outputDir: string; lag: null } | { outputDir: string; lag: { reason: string; fence: number; build: string } };

interface LagEntry {
  outputDir: string;
  host: string;
  since: number;
  at: number;
  reason: string;
  fence: number;
  build: string;
}

/** An entry not seen again this long (its worker stopped, or the output was removed) is not shown. */
export const LAG_SEEN_WITHIN_MS = 2 * 60_000;

const fieldOf = (host: string, outputDir: string) => `${host} ${outputDir}`;

/** Records one repair pass's outcomes (at `now`, on the claims Redis clock): one round trip, two when an output lags. */
export async function recordCurrentLag(
  client: Pick<Redis, "hget" | "hset" | "hdel">,
  keys: RedisKeys,
  outcomes: readonly CurrentLagOutcome[],
  now: number,
  host = os.hostname(),
): Promise<void> {
  const following = outcomes.filter((o) => o.lag === null).map((o) => fieldOf(host, o.outputDir));
  const lagging = outcomes.filter((o): o is Extract<CurrentLagOutcome, { lag: object }> => o.lag !== null);
  const writes: Promise<unknown>[] = [];
  if (following.length > 0) writes.push(client.hdel(keys.currentLagging, ...following));
  for (const { outputDir, lag } of lagging) {
    const field = fieldOf(host, outputDir);
    writes.push(
      client.hget(keys.currentLagging, field).then((raw) => {
        const earlier = parse(raw);
        const since = earlier && earlier.build === lag.build ? earlier.since : now;
        const entry: LagEntry = { outputDir, host, since, at: now, ...lag };
        return client.hset(keys.currentLagging, field, JSON.stringify(entry));
      }),
    );
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
  return entries.map(
    (e) =>
      `${e.outputDir}/current on ${e.host} still serves an older build than the published ${e.build} (fence ${e.fence}) since ${new Date(e.since).toISOString()}: repair fails there (${e.reason}); check that disk (dmesg), repair moves current once it works`,
  );
}
