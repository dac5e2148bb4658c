/**
 * Waits for `work` at most `ms`: true when it settled (resolved or rejected) in time, false when
 * the wait ran out first. The work is not cancelled and its rejection is never unhandled; the
 * timer is cleared as soon as either side wins, so a finished wait holds no process open.
 * For the waits of a stop, where a server that never answers must not hold the exit.
 */
export async function settledWithin(work: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      work.then(
        () => true,
        () => true,
      ),
      new Promise<false>((resolve) => (timer = setTimeout(() => resolve(false), ms))),
    ]);
  } finally {
    clearTimeout(timer);
  }
}
