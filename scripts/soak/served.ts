/**
 * Was a request for a version served? The soak's rule for a rebuild whose versions the caller
 * names (the trigger stream also asks for older versions again: `back`), so "the version was
 * published once" is not enough: A → B → A must end with A published after the last request.
 *
 * A request for `version` made at `requestedAt` is served when
 *   - a publish of that version was seen done at or after the request (its job's own, or one it
 *     rode on as a claim-held skip), or
 *   - its job's last attempt ended at `endedAt` without publishing (a skip), while the output
 *     served that version (the highest-fenced publish seen done by then) and no build of another
 *     version that went on to publish was in flight (begun before, done after): such a build
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
  /** When it was seen done: its record's finishedAt, else the watcher's first sight of its pointer. */
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

export function requestServed(request: {
  publishes: readonly SeenPublish[];
  version: string;
  requestedAt: number;
  /** When the job's last attempt ended without publishing (its record's finishedAt); none: it never ended so. */
  endedAt?: number;
}): Served {
  const { publishes, version, requestedAt, endedAt } = request;
  if (publishes.some((p) => p.version === version && p.doneAt >= requestedAt)) return { served: true };
  if (endedAt === undefined) return { served: false, why: `no publish of ${version} after the request` };
  const serving = servedAt(publishes, endedAt);
  if (serving?.version !== version)
    return {
      served: false,
      why: `its last attempt ended while the output served ${serving ? `${serving.version} (fence ${serving.fence})` : "nothing"}, and ${version} was not published after`,
    };
  const inFlight = publishes.find(
    (p) => p.version !== version && p.beganAt !== undefined && p.beganAt < endedAt && p.doneAt > endedAt,
  );
  if (inFlight)
    return {
      served: false,
      why: `its last attempt ended while a build of ${inFlight.version} (fence ${inFlight.fence}) was under way, and ${version} was not published after`,
    };
  return { served: true };
}
