/** Runs once when the Next.js server starts: a bad environment or definitions file stops it with exit code 2. */
export async function register(): Promise<void> {
  if (process.env.NEXT_RUNTIME !== "nodejs") return;
  const { loadConfigOrExit } = await import("./lib/config");
  const { loadDefinitionsOrExit } = await import("./lib/rebuilds/definitions");
  const config = loadConfigOrExit("claimwatch-web");
  const definitions = loadDefinitionsOrExit(config.definitionsPath, "claimwatch-web", config.definitionsSource);
  // Finished runs from before the timeline counters (an upgrade) counted once, in the background.
  const { startWebTimelineBackfill } = await import("./lib/web/timeline-backfill");
  startWebTimelineBackfill();
  if (definitions.alerts) {
    const { startWebAlerting } = await import("./lib/alerts/start-web");
    startWebAlerting();
  }
}
