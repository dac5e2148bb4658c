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

/**
 * `work`, or a rejection naming `what` once `ms` have passed. The work is not cancelled (use it
 * where that is harmless: reads, or writes a caller does not send again); the timer is cleared
 * as soon as either side wins.
 */
export function withTimeout<T>(work: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: no answer within ${ms} ms`)), ms);
  });
  return Promise.race([work, timeout]).finally(() => clearTimeout(timer));
}
