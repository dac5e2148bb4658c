/**
 * How often a worker beats and when it counts as gone: plain numbers, shared by the worker's
 * heartbeat (lib/workers/heartbeat) and the dashboard's Workers page, which re-reads the beats at
 * this period (they are not live events).
 */

/** How often a worker beats. */
export const HEARTBEAT_EVERY_MS = 5_000;
/** A worker that has not beaten for this long is gone (three missed beats). */
export const HEARTBEAT_TTL_MS = 15_000;
