/**
 * The Claims page's search: a claim is found when its name *contains* the text, case-insensitive
 * (claim names begin `output:` or `tenant:`, so "starts with" found nothing a person would type).
 * One rule for the server's listing (list.ts) and the browser's live cache (lib/ui/live-cache.ts),
 * which applies claim events to a searched page without asking the server again.
 */
export function claimNameMatches(name: string, search: string): boolean {
  return name.toLowerCase().includes(search.toLowerCase());
}
