/**
 * Was a request for a version served? The soak's rule for a rebuild whose versions the caller
 * names (the trigger stream also asks for older versions again: `back`), so "the version was
 * published once" is not enough: A → B → A must end with A published after the last request.
 *
 * A request for `version` made at `requestedAt` is served when
 *   - a publish of that version was done after the request was first sent (its job's own, or
 *     one it rode on as a claim-held skip; done at the earliest sight of it: a late final write
 *     does not make an older publish new), or
 *   - its job's last attempt ended without publishing (a skip), and at some moment while it ran
 *     the output served that version (the highest-fenced publish done by then) with no build of
 *     another version that went on to publish in flight (begun before, done after): such a build
 *     begun first unmarks the version, so a skip then is "already rebuilt" said of an output that
 *     is about to serve something else.
 *
 * Times are Redis `TIME` (run records) or the soak's clock on the same host (the watcher's
 * pointers, the triggers). Pure: the checker gathers the publishes.
 */

/** One publish of one output. */
export interface SeenPublish {
  version: string;
  fence: number;
  /**
   * When it was done at the latest: the earliest of its record's finishedAt and the watcher's
   * first sight of its pointer (a final write can land long after the publish).
   */
  doneAt: number;
  /** When its run began (record startedAt), when known. */
  beganAt?: number;
}

export type Served = { served: true } | { served: false; why: string };

/** The version the output served at `t`: the highest-fenced publish seen done by then. */
export function servedAt(publishes: readonly SeenPublish[], t: number): SeenPublish | undefined {
  let top: SeenPublish | undefined;
  for (const p of publishes) if (p.doneAt <= t && (!top || p.fence > top.fence)) top = p;
  return top;
}

/** A build of another version than `version` under way at `t` (begun before, done after), that published. */
function buildUnderWay(publishes: readonly SeenPublish[], version: string, t: number): SeenPublish | undefined {
  return publishes.find((p) => p.version !== version && p.beganAt !== undefined && p.beganAt < t && p.doneAt > t);
}

export function requestServed(request: {
  publishes: readonly SeenPublish[];
  version: string;
  /** When the request was first sent (a resend answered with the same job counts from the first). */
  requestedAt: number;
  /**
   * The job's last attempt, when it ended without publishing (a skip): it decided somewhen between
   * its start and its record's end (a skip decided under the claim is written after its release).
   */
  ended?: { from: number; at: number };
}): Served {
  const { publishes, version, requestedAt, ended } = request;
  if (publishes.some((p) => p.version === version && p.doneAt >= requestedAt)) return { served: true };
  if (ended === undefined) return { served: false, why: `no publish of ${version} after the request` };
  // The moments where the answer can change, within the attempt: any one that served it will do.
  const moments = [ended.from, ended.at, ...publishes.flatMap((p) => [p.doneAt, ...(p.beganAt ? [p.beganAt] : [])])];
  const within = moments.filter((t) => t >= ended.from && t <= ended.at);
  if (within.some((t) => servedAt(publishes, t)?.version === version && !buildUnderWay(publishes, version, t)))
    return { served: true };
  const serving = servedAt(publishes, ended.at);
  if (serving?.version !== version)
    return {
      served: false,
      why: `its last attempt ended while the output served ${serving ? `${serving.version} (fence ${serving.fence})` : "nothing"}, and ${version} was not published after`,
    };
  const underWay = buildUnderWay(publishes, version, ended.at) ?? buildUnderWay(publishes, version, ended.from);
  return {
    served: false,
    why: `its last attempt ran while a build of ${underWay?.version ?? "another version"}${underWay ? ` (fence ${underWay.fence})` : ""} was under way, and ${version} was not published after`,
  };
}
