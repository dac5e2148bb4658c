/** Runs once when the Next.js server starts: a bad environment stops it with exit code 2. */
export async function register(): Promise<void> {
  if (process.env.NEXT_RUNTIME !== "nodejs") return;
  const { loadConfigOrExit } = await import("./lib/config");
  loadConfigOrExit("claimwatch-web");
}
